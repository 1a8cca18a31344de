"""What recording a dispatch costs the host: wgpu-native's CPU time inside
``GPUCommandEncoder.finish`` per dispatch of a trivial kernel, by the number of storage buffers
bound, (a) every dispatch with the same read_write bindings (the bind group set each time or once),
(b) two pipelines alternating, each writing the buffers the other reads (a usage transition, so
a barrier, at every dispatch, as between a fit iteration's dispatches). 4,000 dispatches a
command buffer, median of 5. Host-side only: the GPU's work is one thread a dispatch.

    python tools/finish_cost.py     # on a lent GPU after `. tools/device_env.sh`, or here
"""

import time

import numpy as np
import wgpu

N = 4000


def _finish_us(dev, steps: list, set_once: bool = False) -> float:
    """CPU us a dispatch inside finish: N dispatches cycling through ``steps`` (pipeline, bind
    group); ``set_once``: one step, its pipeline and bind group set before the dispatches only."""
    times = []
    for _ in range(5):
        enc = dev.create_command_encoder()
        cpass = enc.begin_compute_pass()
        for j in range(N):
            if not set_once or j == 0:
                pl, bg = steps[j % len(steps)]
                cpass.set_pipeline(pl)
                cpass.set_bind_group(0, bg)
            cpass.dispatch_workgroups(1)
        cpass.end()
        t = time.thread_time()
        cb = enc.finish()
        times.append((time.thread_time() - t) / N * 1e6)
        dev.queue.submit([cb])
    return float(np.median(times))


def _pipeline(dev, code: str):
    return dev.create_compute_pipeline(layout="auto", compute={"module": dev.create_shader_module(code=code),
                                                               "entry_point": "main"})


def _bind(dev, pl, bufs):
    return dev.create_bind_group(layout=pl.get_bind_group_layout(0),
                                 entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])


def same(k: int) -> str:
    decl = "\n".join(f"@group(0) @binding({i}) var<storage, read_write> b{i}: array<f32>;" for i in range(k))
    return f"{decl}\n@compute @workgroup_size(1) fn main() {{ b0[1] = {' + '.join(f'b{i}[0]' for i in range(k))}; }}"


def alternating(k: int, write_even: bool) -> str:
    writes = [i for i in range(k) if (i % 2 == 0) == write_even]
    decl = "\n".join(f"@group(0) @binding({i}) var<storage, {'read_write' if i in writes else 'read'}> b{i}: array<f32>;"
                     for i in range(k))
    total = " + ".join(f"b{i}[0]" for i in range(k))
    return decl + "\n@compute @workgroup_size(1) fn main() {\n" + "".join(f"    b{i}[1] = {total};\n" for i in writes) + "}"


def main() -> None:
    adapter = wgpu.gpu.request_adapter_sync()
    limit = "max-storage-buffers-per-shader-stage"
    dev = adapter.request_device_sync(required_limits={limit: adapter.limits[limit]})
    print(f"# {adapter.info['device']}: finish's CPU time a dispatch, {N} dispatches, median of 5")
    for k in (1, 2, 4, 8, 12, 16):
        pl = _pipeline(dev, same(k))
        step = (pl, _bind(dev, pl, [dev.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE) for _ in range(k)]))
        print(f"bindings {k:2d}, same usage: {_finish_us(dev, [step]):.2f} us "
              f"(bind group set once: {_finish_us(dev, [step], set_once=True):.2f})")
    for k in (2, 4, 8, 12):
        bufs = [dev.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE) for _ in range(k)]
        steps = [(p, _bind(dev, p, bufs)) for p in (_pipeline(dev, alternating(k, w)) for w in (True, False))]
        print(f"bindings {k:2d}, alternating read / read_write: {_finish_us(dev, steps):.2f} us")


if __name__ == "__main__":
    main()
