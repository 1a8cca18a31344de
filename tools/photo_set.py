"""Lay out the second set of photographs not tuned on (docs/QUALITY.md, "Photographs not tuned on"):
eight pictures from two public repositories, each checked against its git blob id, shrunk to at most
1024 px on the longer side (Lanczos; the fits work at 176 px) and written as PNG under OUT.

    git clone https://github.com/mateogo42/goi /tmp/goi
    git clone https://github.com/chasecee/Image-API /tmp/image-api
    python tools/photo_set.py --goi /tmp/goi --image-api /tmp/image-api [--out .untuned/more]

The files are not committed: their licences are their repositories' (Kodak's test images, public
domain paintings, and photographs whose terms we did not check).
"""

import argparse
import subprocess
import sys
from io import BytesIO
from pathlib import Path

from PIL import Image

# name: (repository option, commit, path, blob id)
GOI = "5f052c85c6726af269fb2c4c2f0d2e506ddff2e9"
IMAGE_API = "cc95759f5e1f4a8bfb01b8c8ff483d29df5c675a"
PHOTOS = {
    "dice": ("goi", GOI, "images/dice.png", "2ef2330b40c9d9aa7b8f1efc97893a10c43dadb7"),
    "kodim10": ("goi", GOI, "images/kodim10.png", "85f1b1ca8337c62abdcf7fd3efb8adcbab131728"),
    "kodim23": ("goi", GOI, "images/kodim23.png", "ca8dcfcc2fcf456548a25291c78f4c9a2c89fb01"),
    "chapel": ("goi", GOI, "images/wikipedia_008.png", "9df0e53f59c734a57e8e37542962a4950c8fce02"),
    "autumn_landscape": ("image_api", IMAGE_API, "test_images/autumn_landscape.jpg",
                         "1988756fc17e0981859a9698fd164303d8f8094f"),
    "milkmaid": ("image_api", IMAGE_API, "test_images/het_melkmeisje_small.jpg",
                 "45e9450c71f31c57d2db9280d29e2124d70e3444"),
    "red_moon": ("image_api", IMAGE_API, "test_images/red_moon.jpg", "57162ea18cdd750550cf6e708ea3d252c07296dd"),
    "the_scream": ("image_api", IMAGE_API, "test_images/the_scream.jpg", "eb83bc2c65a18c97b3f4e8653c913c249c42fd7c"),
}
LONGEST = 1024


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True).stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--goi", type=Path, required=True, help="a clone of github.com/mateogo42/goi")
    p.add_argument("--image-api", type=Path, required=True, help="a clone of github.com/chasecee/Image-API")
    p.add_argument("--out", type=Path, default=Path(".untuned/more"))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for name, (which, commit, path, blob) in PHOTOS.items():
        repo = a.goi if which == "goi" else a.image_api
        found = git(repo, "rev-parse", f"{commit}:{path}").decode().strip()
        if found != blob:
            print(f"photo_set: {path} at {commit[:10]} is blob {found[:10]}, expected {blob[:10]}", file=sys.stderr)
            return 2
        im = Image.open(BytesIO(git(repo, "cat-file", "blob", blob)))
        im.load()
        if max(im.size) > LONGEST:
            im.thumbnail((LONGEST, LONGEST), Image.LANCZOS)
        dest = a.out / f"{name}.png"
        im.save(dest)
        print(f"{dest} {im.size[0]}x{im.size[1]} {im.mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
