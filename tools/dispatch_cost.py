"""Host CPU of one compute dispatch against the buffers its bind group holds (issue #19's host CPU).

Five pipelines, each reading B storage buffers and writing the first, are dispatched 2,000 times
each in one compute pass through wgpu-native's C entry points (as the fit loop's ``Repeats``
does); this thread's CPU is split into encoding (the three calls a dispatch), ``finish``
(wgpu-native records and validates the pass there) and ``submit``, per dispatch.

    python tools/dispatch_cost.py [B ...]            # each pipeline its own buffers
    python tools/dispatch_cost.py --shared [B ...]   # all five share theirs (barriers between dispatches)
"""

import argparse
import time

import wgpu
from wgpu.backends.wgpu_native._ffi import ffi, lib

STORAGE_SRC = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC


def pipeline(dev, bufs):
    n = len(bufs)
    decl = "\n".join(f"@group(0) @binding({i}) var<storage, read_write> b{i}: array<u32>;" for i in range(n))
    reads = "\n".join(f"  acc += b{i}[0];" for i in range(1, n))
    code = f"{decl}\n@compute @workgroup_size(64) fn main() {{\n  var acc = 0u;\n{reads}\n  b0[0] = acc;\n}}"
    pl = dev.create_compute_pipeline(layout="auto",
                                     compute={"module": dev.create_shader_module(code=code), "entry_point": "main"})
    bg = dev.create_bind_group(layout=pl.get_bind_group_layout(0),
                               entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])
    return pl, bg


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bindings", nargs="*", type=int, default=[2, 4, 8, 16])
    p.add_argument("--shared", action="store_true", help="the five pipelines share their buffers")
    p.add_argument("--dispatches", type=int, default=2000, help="per pipeline and pass")
    a = p.parse_args()
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    dev = adapter.request_device_sync()
    print(adapter.info["device"], "shared buffers" if a.shared else "own buffers")
    for B in a.bindings:
        shared = [dev.create_buffer(size=4096, usage=STORAGE_SRC) for _ in range(B)]
        pipes = [pipeline(dev, shared if a.shared else [dev.create_buffer(size=4096, usage=STORAGE_SRC)
                                                         for _ in range(B)]) for _ in range(5)]
        calls = [(pl._internal, bg._internal) for pl, bg in pipes]
        probe = dev.create_buffer(size=4096, usage=STORAGE_SRC)
        for rep in range(3):  # the first is a warm-up
            c0 = time.thread_time()
            enc = dev.create_command_encoder()
            cpass = enc.begin_compute_pass()
            h = cpass._internal
            for _ in range(a.dispatches):
                for pl, bg in calls:
                    lib.wgpuComputePassEncoderSetPipeline(h, pl)
                    lib.wgpuComputePassEncoderSetBindGroup(h, 0, bg, 0, ffi.NULL)
                    lib.wgpuComputePassEncoderDispatchWorkgroups(h, 1, 1, 1)
            c1 = time.thread_time()
            cpass.end()
            command = enc.finish()
            c2 = time.thread_time()
            dev.queue.submit([command])
            c3 = time.thread_time()
            dev.queue.read_buffer(probe)  # (waits for the submission)
            n = 5 * a.dispatches
            if rep:
                print(f"B={B:2d} encode {1e6 * (c1 - c0) / n:5.2f} us  finish {1e6 * (c2 - c1) / n:5.2f} us  "
                      f"submit {1e6 * (c3 - c2) / n:5.2f} us per dispatch")


if __name__ == "__main__":
    main()
