"""`trifit video`'s input and output: decoding, checks, encoders by extension, the flicker metric.

Input: a video file (anything the FFmpeg inside PyAV decodes: MP4, MOV, MKV, WebM, GIF, ...) or a
folder of frames (PNG, JPEG, ... in natural name order: ``frame_9`` before ``frame_10``).
:func:`open_clip` checks it all before any fit: every video frame is decoded once (a truncated or
damaged file is refused whole, not found out at frame 300), a folder's frames are verified by
their headers and checksums, and all frames must have one size (the first odd one is named).

Output (:func:`output_kind`, by extension): MP4/MOV/MKV with H.264, WebM with VP9, GIF, or a
folder of ``frame_0000.png``...; at the input's frame rate. :class:`ClipOutput` writes a video
file into a temporary file beside it that is renamed into place when it is finalised -- at the
end, or on Ctrl+C with every finished frame -- so it is never half-written. Audio is copied as
it is when the output container takes its codec, else dropped with a note. :class:`FramePictures`
renders a frame's scene at the output size; the window's video export (app/video_export.py)
writes through the same two classes as the command.

The frame loop (fitting, progress kept for a resume) is render/videorun.py's; ``run_video`` is
importable from here too. PyAV (``pip install 'trifit[video]'``) is imported only here, and only
when a video is used.
"""

from __future__ import annotations

import logging
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import numpy as np

from .errors import ImageError, TrifitError
from .fileutil import AtomicFile, atomic_write

log = logging.getLogger("trifit")

#: frame rate of a folder of frames unless told (``--fps``)
DEFAULT_FPS = Fraction(25)
#: video outputs by suffix: (container format, video codec, pixel format, codec options)
VIDEO_OUTPUTS = {
    ".mp4": ("mp4", "libx264", "yuv420p", {"crf": "18", "preset": "medium"}),
    ".m4v": ("mp4", "libx264", "yuv420p", {"crf": "18", "preset": "medium"}),
    ".mov": ("mov", "libx264", "yuv420p", {"crf": "18", "preset": "medium"}),
    ".mkv": ("matroska", "libx264", "yuv420p", {"crf": "18", "preset": "medium"}),
    ".webm": ("webm", "libvpx-vp9", "yuv420p", {"crf": "30", "b": "0", "row-mt": "1"}),
    ".gif": ("gif", "gif", "pal8", {}),
}
#: frame files taken from a folder
FRAME_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff", ".ppm")
FOLDER_FRAME = "frame_{:04d}.png"
#: what File > Open takes as a clip (beside the pictures it takes)
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".wmv", ".flv", ".ogv", ".ts")


def _av():
    try:
        import av
    except ImportError:
        raise TrifitError("video needs PyAV; install it with: pip install 'trifit[video]'") from None
    return av


def _reason(exc: BaseException) -> str:
    """What an FFmpeg error says, without its error number and file name."""
    return _one_line(getattr(exc, "strerror", None) or exc)


def _one_line(exc) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


# ---------------------------------------------------------------------- input
@dataclass
class Clip:
    """A checked input: ``count`` frames of ``size`` (w, h) at ``rate`` frames a second."""

    path: Path
    count: int
    size: tuple[int, int]
    rate: Fraction
    files: list[Path] | None = None   # a folder's frames, in order; None for a video file
    audio: str | None = None          # the audio codec of a video file's first audio stream

    def frames(self, start: int = 0) -> Iterator:
        """Frames ``start``, ``start + 1``, ... in order, as trifit.imageio.as_target takes them
        (a folder's: the files; a video's: PIL images at the source size)."""
        if self.files is not None:
            yield from self.files[start:]
            return
        av = _av()
        try:
            with av.open(str(self.path)) as c:
                stream = c.streams.video[0]
                stream.thread_type = "AUTO"
                for k, frame in enumerate(c.decode(stream)):
                    if k >= start:
                        yield frame.to_image()
        except av.FFmpegError as exc:
            raise ImageError(f"{self.path}: cannot decode the video ({_reason(exc)})") from None


def _natural_key(p: Path):
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", p.name)]


def open_clip(path, fps: float | None = None) -> Clip:
    """Check an input (a video file or a folder of frames) before any work; :class:`ImageError`
    with one line saying what is wrong (no such file, unreadable, truncated, no frames, mixed
    frame sizes naming the first odd frame)."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise ImageError(f"{p}: no such file or folder") from None
    except (OSError, ValueError) as exc:
        raise ImageError(f"{p}: cannot read: {_one_line(exc)}") from None
    if stat.S_ISDIR(st.st_mode):
        return _open_folder(p, Fraction(fps).limit_denominator(1001) if fps else DEFAULT_FPS)
    if not stat.S_ISREG(st.st_mode):
        raise ImageError(f"{p}: not a regular file or a folder")
    if st.st_size == 0:
        raise ImageError(f"{p}: empty file")
    clip = _open_video(p)
    if fps:
        clip.rate = Fraction(fps).limit_denominator(1001)
    return clip


def _open_folder(p: Path, rate: Fraction) -> Clip:
    from .imageio import checked_size

    files = sorted((q for q in p.iterdir() if q.is_file() and q.suffix.lower() in FRAME_SUFFIXES
                    and not q.name.startswith(".")), key=_natural_key)
    if not files:
        raise ImageError(f"{p}: no frames (no {', '.join(FRAME_SUFFIXES)} files) in the folder")
    size = None
    for q in files:
        try:
            wh = checked_size(q)  # decoded whole, as the fit will load it: no frame refused mid-clip
        except ImageError as exc:
            raise ImageError(f"{q}: not a readable frame ({_one_line(str(exc).removeprefix(f'{q}: '))})") from None
        if size is None:
            size = wh
        elif wh != size:
            raise ImageError(f"{q}: frame is {wh[0]}x{wh[1]}, the first frame ({files[0].name}) is "
                             f"{size[0]}x{size[1]}: a clip's frames must have one size")
    return Clip(p, len(files), size, rate, files=files)


def _open_video(p: Path) -> Clip:
    av = _av()
    try:
        with av.open(str(p)) as c:
            if not c.streams.video:
                raise ImageError(f"{p}: has no video stream")
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            expected = int(stream.frames or 0)
            rate = stream.average_rate or stream.guessed_rate or DEFAULT_FPS
            audio = c.streams.audio[0].codec_context.name if c.streams.audio else None
            count, size = 0, None
            for frame in c.decode(stream):
                wh = (frame.width, frame.height)
                if size is None:
                    size = wh
                elif wh != size:
                    raise ImageError(f"{p}: frame {count} is {wh[0]}x{wh[1]}, the first frame is "
                                     f"{size[0]}x{size[1]}: a clip's frames must have one size")
                count += 1
    except ImageError:
        raise
    except av.EOFError:
        raise ImageError(f"{p}: no video frames (the file ends before its first frame)") from None
    except (av.FFmpegError, OSError, ValueError, EOFError) as exc:
        raise ImageError(f"{p}: not a readable video, or truncated ({_reason(exc)})") from None
    if count == 0:
        raise ImageError(f"{p}: no video frames")
    if expected and count < expected:
        raise ImageError(f"{p}: truncated or damaged: {count} of its {expected} frames decode")
    return Clip(p, count, size, Fraction(rate), audio=audio)


# ---------------------------------------------------------------------- output
@dataclass
class OutputSpec:
    path: Path
    folder: bool
    container: str | None = None
    codec: str | None = None
    pix_fmt: str | None = None
    options: dict = field(default_factory=dict)

    def frame_size(self, w: int, h: int) -> tuple[int, int]:
        """The size frames are encoded at: H.264 and VP9 in 4:2:0 need even sides."""
        if self.pix_fmt == "yuv420p":
            return max(2, w - w % 2), max(2, h - h % 2)
        return w, h

    def check_frame_size(self, w: int, h: int) -> None:
        """Refuse, before any work, frames of a size this encoder will not open (x264 takes no
        side over 16384, nor frames of that many pixels): its encoder is opened once, in memory,
        as the writer will open it."""
        if self.folder:
            return
        av = _av()
        ctx = av.CodecContext.create(self.codec, "w")
        ctx.width, ctx.height, ctx.pix_fmt, ctx.time_base = w, h, self.pix_fmt, Fraction(1, 25)
        try:
            ctx.open()
        except (av.FFmpegError, ValueError) as exc:
            raise TrifitError(f"{self.path}: the {self.codec} encoder cannot take {w}x{h} frames ({_reason(exc)}); "
                              "give a smaller --scale or --width, or another format") from None


def output_kind(path) -> OutputSpec:
    """What ``path`` names: a folder (an existing one, or a name with no suffix) or a video file
    whose suffix has an encoder in this build; anything else is refused before any work."""
    p = Path(path)
    if p.is_dir() or (not p.suffix and not p.exists()):
        return OutputSpec(p, True)
    suffix = p.suffix.lower()
    if suffix not in VIDEO_OUTPUTS:
        raise TrifitError(f"{p}: no bundled encoder writes {suffix or 'files without a suffix'}; use "
                          f"{', '.join(VIDEO_OUTPUTS)} or a folder (frame_0000.png, ...)")
    container, codec, pix_fmt, options = VIDEO_OUTPUTS[suffix]
    av = _av()
    try:
        av.codec.Codec(codec, "w")
    except (av.FFmpegError, ValueError) as exc:
        raise TrifitError(f"{p}: this build of PyAV has no {codec} encoder for {suffix} ({_reason(exc)})") from None
    return OutputSpec(p, False, container, codec, pix_fmt, dict(options))


#: x264's instruction sets up to AVX, by x264's name, with the numpy CPU feature that says the machine has it
_X264_CPU = (("MMX2", "SSE"), ("SSE", "SSE"), ("SSE2", "SSE2"), ("SSE2Fast", "SSE2"), ("SSE3", "SSE3"),
             ("SSSE3", "SSSE3"), ("SSE4.1", "SSE41"), ("SSE4.2", "SSE42"), ("AVX", "AVX"))


def x264_cpu() -> str | None:
    """The instruction sets libx264 may use (its ``asm`` option) on an x86 machine: those up to AVX
    that the machine has; None elsewhere (x264's own choice).

    Why: the same frames must give the same bytes (a resumed run, the window's export and the
    command are compared to the byte), and with x264's AVX-512 code -- its default where the CPU
    has it -- they sometimes do not, whatever the thread counts; with AVX-512 left out they do
    (tests/test_video.py encodes one clip again and again). Under valgrind (no AVX-512) x264's
    default code and its SSE4.2 level read uninitialised memory when a frame is an odd number of
    macroblocks wide (a lookahead stack value reaching the MB-tree's quantiser offsets); the code up
    to AVX did not. The speed and quality are the same (docs/QUALITY.md, "Video"); another x86 CPU
    can still give other bytes than this one.
    """
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "x86", "i386", "i686"):
        return None
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as has
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as has
        except ImportError:
            return None
    names = []
    for name, feature in _X264_CPU:
        if not has.get(feature):
            break  # each set builds on the ones before it
        names.append(name)
    return ",".join(names) or None


class FolderWriter:
    """Frames as ``frame_0000.png``, ... each written atomically as it comes."""

    def __init__(self, spec: OutputSpec):
        self.folder = spec.path

    def path(self, k: int) -> Path:
        return self.folder / FOLDER_FRAME.format(k)

    def write(self, k: int, pixels: np.ndarray) -> None:
        from PIL import Image

        from .export import picture_options

        im = Image.fromarray(pixels, "RGB")
        atomic_write(self.path(k), lambda f: im.save(f, format="PNG", **picture_options("PNG")))


class VideoWriter:
    """One video file through PyAV, written to ``fileobj`` (the temporary file that
    :class:`ClipOutput` renames into place); audio packets of ``clip`` are copied along with
    the frames when the container takes their codec."""

    def __init__(self, fileobj, spec: OutputSpec, clip: Clip, size: tuple[int, int], note: Callable[[str], None]):
        av = _av()
        self.av, self.spec, self.rate = av, spec, clip.rate
        self.out = av.open(fileobj, "w", format=spec.container)
        self.stream = self.out.add_stream(spec.codec, rate=clip.rate)
        self.stream.width, self.stream.height = size
        self.stream.pix_fmt = spec.pix_fmt
        options = dict(spec.options)
        if spec.codec == "libx264" and (cpu := x264_cpu()):
            options["x264-params"] = f"asm={cpu}"
        self.stream.codec_context.options = options
        self.frames = 0
        self._audio = None
        if clip.audio is not None:
            if clip.audio in self.out.supported_codecs:
                self._audio = _AudioCopy(av, clip.path, self.out)
            else:
                note(f"the input's {clip.audio} audio cannot go into {spec.path.suffix} as it is: the output has no sound")

    def write(self, k: int, pixels: np.ndarray) -> None:
        if k != self.frames:
            raise TrifitError(f"frame {k} written after {self.frames} frames")  # a bug, never input
        frame = self._frame(pixels)
        frame.pts = k
        frame.time_base = Fraction(1) / self.rate
        for packet in self.stream.encode(frame):
            self.out.mux(packet)
        self.frames += 1
        if self._audio is not None:
            self._audio.copy_until(self.frames / self.rate)

    def _frame(self, pixels: np.ndarray):
        VideoFrame = self.av.VideoFrame
        if self.spec.pix_fmt != "pal8":
            return VideoFrame.from_ndarray(np.ascontiguousarray(pixels), format="rgb24")
        from PIL import Image

        # a palette of the frame's own colours (FFmpeg's own pal8 conversion is a fixed 3-3-2 palette)
        im = Image.fromarray(pixels, "RGB").quantize(256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        pal = np.zeros((256, 4), np.uint8)
        rgb = np.asarray(im.getpalette()[: 256 * 3], np.uint8).reshape(-1, 3)
        pal[: len(rgb), 0], pal[: len(rgb), 1:] = 255, rgb  # ARGB
        return VideoFrame.from_ndarray((np.asarray(im, np.uint8), pal), format="pal8")

    def close(self, complete: bool) -> None:
        """Flush the encoder (and, for a complete clip, the rest of the audio) and finalise the container."""
        try:
            for packet in self.stream.encode(None):
                self.out.mux(packet)
            if self._audio is not None:
                self._audio.copy_until(None if complete else self.frames / self.rate)
        finally:
            self.abandon()

    def abandon(self) -> None:
        """Close the containers, with no flush: the file is being thrown away."""
        if self._audio is not None:
            self._audio.close()
            self._audio = None
        self.out.close()


class _AudioCopy:
    """The input's first audio stream, packet by packet into the output (no re-encoding), up to a time."""

    def __init__(self, av, path: Path, out):
        self.src = av.open(str(path))
        self.stream = self.src.streams.audio[0]
        self.dst = out.add_stream_from_template(self.stream)
        self.packets = self.src.demux(self.stream)
        self.first = None
        self.pending = None

    def copy_until(self, seconds: float | None) -> None:
        tb = self.stream.time_base
        while True:
            pkt = self.pending or next(self.packets, None)
            self.pending = None
            if pkt is None or pkt.pts is None:
                if pkt is None:
                    return
                continue
            if self.first is None:
                self.first = pkt.pts
            if seconds is not None and (pkt.pts - self.first) * tb >= seconds:
                self.pending = pkt
                return
            pkt.pts -= self.first
            if pkt.dts is not None:
                pkt.dts -= self.first
            pkt.stream = self.dst
            self.dst.container.mux(pkt)

    def close(self) -> None:
        self.src.close()


class ClipOutput:
    """A clip's output, frame by frame in order: a folder's PNGs, each written atomically as it
    comes, or a video file encoded into a temporary file that :meth:`close` renames into place
    (with no frame, or after :meth:`discard`, there is no file at all). The frames may come from
    a thread of their own (render/background.py); open and close stay with the caller."""

    def __init__(self, spec: OutputSpec, clip: Clip, size: tuple[int, int], note: Callable[[str], None]):
        self.spec, self.frames = spec, 0
        self._file = None
        if spec.folder:
            self._writer = FolderWriter(spec)
            return
        self._file = AtomicFile(spec.path)
        try:
            self._writer = VideoWriter(self._file.file, spec, clip, size, note)
        except BaseException:
            self._file.discard()
            raise

    def has(self, k: int) -> bool:
        """Whether frame ``k`` is there already (a folder's file from an earlier run)."""
        return self.spec.folder and self._writer.path(k).exists()

    def write(self, k: int, pixels: np.ndarray) -> None:
        self._writer.write(k, pixels)
        self.frames = max(self.frames, k + 1)

    def close(self, complete: bool) -> bool:
        """Finalise the output (``complete``: the whole clip, audio to its end); False when no
        frame was written (and so no file is)."""
        if self._file is None:
            return self.frames > 0
        if self.frames == 0:
            self.discard()
            return False
        try:
            self._writer.close(complete)
        except BaseException:
            self._file.discard()
            raise
        self._file.commit()
        return True

    def discard(self) -> None:
        """Give up: a video file is not written (a folder keeps the frames already there)."""
        if self._file is None:
            return
        try:
            self._writer.abandon()
        except Exception:  # the file goes either way
            pass
        self._file.discard()


class FramePictures:
    """Output frames from scenes: rendered at the output size with the chosen edges (uint8).
    On the engine's thread (the fitting thread, or the window's worker)."""

    def __init__(self, engine, width: int, height: int, edges: str = "crisp"):
        self.engine, self.width, self.height, self.edges = engine, width, height, edges

    def of(self, scene) -> np.ndarray:
        from .export import render_large, with_edges

        return render_large(with_edges(scene, self.width, self.height, self.edges), self.width, self.height,
                            self.engine, dtype=np.uint8)


def is_clip(path) -> bool:
    """Whether File > Open should take ``path`` as a clip: a video file by its suffix, or a folder (of frames)."""
    p = Path(path)
    return p.suffix.lower() in VIDEO_SUFFIXES or p.is_dir()


# ---------------------------------------------------------------------- measurement
def flicker(frames, mask: np.ndarray | None = None) -> float:
    """Mean absolute change between consecutive frames ((N, H, W, 3), uint8 or float in [0, 1]),
    over the pixels of ``mask`` (H, W) when given: on a still background, what a viewer sees as
    flicker."""
    f = np.asarray(frames)
    f = f.astype(np.float64) / 255.0 if f.dtype == np.uint8 else f.astype(np.float64)
    if len(f) < 2:
        return 0.0
    d = np.abs(np.diff(f, axis=0)).mean(axis=-1)
    return float((d[:, mask] if mask is not None else d).mean())




def __getattr__(name: str):
    """The frame loop lives in render/videorun.py (which imports this module): its names load on first use."""
    if name in ("run_video", "VideoResult", "work_folder"):
        from . import videorun

        return getattr(videorun, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Clip", "ClipOutput", "FramePictures", "OutputSpec", "flicker", "is_clip", "open_clip", "output_kind",
           "DEFAULT_FPS", "VIDEO_OUTPUTS", "VIDEO_SUFFIXES"]  # (and run_video, VideoResult, work_folder: __getattr__)
