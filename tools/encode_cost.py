"""Host cost of encoding fit iterations: the public wgpu-py calls the fit loop makes, against
wgpu-native's C functions called directly (what skipping wgpu-py's per-call error capture would
save). Encodes 100 iterations of a 150-triangle, 176 px fit 20 times each way; median
microseconds per iteration. A measurement, not used by trifit (docs/QUALITY.md).

    python tools/encode_cost.py
"""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from render import Engine, Fitter, load_image  # noqa: E402
from resources import sample_path  # noqa: E402


def main():
    from wgpu.backends.wgpu_native._ffi import ffi, lib

    eng = Engine("gpu")
    fitter = Fitter(load_image(sample_path("astronaut.png"), 176), engine=eng)
    loop = fitter._loop
    calls = loop._iteration_dispatches()

    def public(k):
        enc = loop.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        for _ in range(k):
            for pl, bg, groups in calls:
                cpass.set_pipeline(pl)
                cpass.set_bind_group(0, bg)
                cpass.dispatch_workgroups(*groups)
        cpass.end()
        enc.finish()

    def direct(k):
        enc = loop.device.create_command_encoder()
        cpass = enc.begin_compute_pass()
        h = cpass._internal
        raw = [(pl._internal, bg._internal, tuple(g) + (1,) * (3 - len(g))) for pl, bg, g in calls]
        for _ in range(k):
            for pl, bg, (x, y, z) in raw:
                lib.wgpuComputePassEncoderSetPipeline(h, pl)
                lib.wgpuComputePassEncoderSetBindGroup(h, 0, bg, 0, ffi.NULL)
                lib.wgpuComputePassEncoderDispatchWorkgroups(h, x, y, z)
        cpass.end()
        enc.finish()

    print(f"# {eng.description}, {time.strftime('%Y-%m-%d %H:%M')}")
    for fn in (public, direct, public, direct):
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            fn(100)
            times.append(time.perf_counter() - t0)
        print(f"{fn.__name__:7s} {np.median(times) / 100 * 1e6:.1f} us per iteration "
              f"({min(times) / 100 * 1e6:.1f}-{max(times) / 100 * 1e6:.1f})")
    fitter.close()


if __name__ == "__main__":
    main()
