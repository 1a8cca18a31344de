"""Host CPU of one compute dispatch against the buffers its bind group holds (issue #19's host CPU).

Five pipelines, each reading B storage buffers and writing the first, are dispatched 2,000 times
each in one compute pass through wgpu-native's C entry points (as the fit loop's ``Repeats``
does); this thread's CPU is split into encoding (the three calls a dispatch), ``finish``
(wgpu-native records and validates the pass there) and ``submit``, per dispatch.

    python tools/dispatch_cost.py [B ...]            # each pipeline its own buffers
    python tools/dispatch_cost.py --shared [B ...]   # all five share theirs (barriers between dispatches)
    python tools/dispatch_cost.py --one-group [B ...]  # ... and one bind group (one layout), set once a pass
"""

import argparse
import time

import wgpu
from wgpu.backends.wgpu_native._ffi import ffi, lib

STORAGE_SRC = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC


def pipeline(dev, bufs, layout=None):
    n = len(bufs)
    decl = "\n".join(f"@group(0) @binding({i}) var<storage, read_write> b{i}: array<u32>;" for i in range(n))
    reads = "\n".join(f"  acc += b{i}[0];" for i in range(1, n))
    code = f"{decl}\n@compute @workgroup_size(64) fn main() {{\n  var acc = 0u;\n{reads}\n  b0[0] = acc;\n}}"
    module = dev.create_shader_module(code=code)
    if layout is not None:
        group_layout, pipeline_layout = layout
        pl = dev.create_compute_pipeline(layout=pipeline_layout, compute={"module": module, "entry_point": "main"})
    else:
        pl = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        group_layout = pl.get_bind_group_layout(0)
    bg = dev.create_bind_group(layout=group_layout,
                               entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])
    return pl, bg


def one_layout(dev, n):
    group = dev.create_bind_group_layout(entries=[
        {"binding": i, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.storage}}
        for i in range(n)])
    return group, dev.create_pipeline_layout(bind_group_layouts=[group])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bindings", nargs="*", type=int, default=[2, 4, 8, 16])
    p.add_argument("--shared", action="store_true", help="the five pipelines share their buffers")
    p.add_argument("--one-group", action="store_true",
                   help="the five share their buffers, one layout and one bind group, set once a pass")
    p.add_argument("--dispatches", type=int, default=2000, help="per pipeline and pass")
    a = p.parse_args()
    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    dev = adapter.request_device_sync()
    print(adapter.info["device"], "one bind group" if a.one_group else "shared buffers" if a.shared else "own buffers")
    for B in a.bindings:
        shared = [dev.create_buffer(size=4096, usage=STORAGE_SRC) for _ in range(B)]
        layout = one_layout(dev, B) if a.one_group else None
        pipes = [pipeline(dev, shared if a.shared or a.one_group else
                          [dev.create_buffer(size=4096, usage=STORAGE_SRC) for _ in range(B)], layout)
                 for _ in range(5)]
        calls = [(pl._internal, bg._internal) for pl, bg in pipes]
        probe = dev.create_buffer(size=4096, usage=STORAGE_SRC)
        for rep in range(3):  # the first is a warm-up
            c0 = time.thread_time()
            enc = dev.create_command_encoder()
            cpass = enc.begin_compute_pass()
            h = cpass._internal
            if a.one_group:
                lib.wgpuComputePassEncoderSetBindGroup(h, 0, calls[0][1], 0, ffi.NULL)
                for _ in range(a.dispatches):
                    for pl, _ in calls:
                        lib.wgpuComputePassEncoderSetPipeline(h, pl)
                        lib.wgpuComputePassEncoderDispatchWorkgroups(h, 1, 1, 1)
            else:
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
