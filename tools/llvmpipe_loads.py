"""What a load costs the adapter by where it reads from: a storage buffer, a uniform buffer or
workgroup memory, the index varying by lane or the same at every lane. Each of 64 x 64 threads
sums 2,000 vec4 loads whose index is a loop variable, as the walks' reads of list entries and
scene records are. On llvmpipe (Mesa 22.3) a storage or workgroup load whose address the
compiler cannot prove uniform -- a loop variable is not, even where every lane agrees -- is a
loop over the vector's lanes; a uniform buffer's is a gather (docs/PERFORMANCE.md, "A load's
cost on llvmpipe by where it reads").

    python tools/llvmpipe_loads.py [--repeats 6]
"""

import argparse
import time

import numpy as np

N = 4096  # vec4 entries: 64 KiB, the uniform binding's limit on lavapipe
THREADS, GROUPS, LOADS = 64, 64, 2000

BINDINGS = {
    "storage": "@group(0) @binding(0) var<storage, read> d: array<vec4f>;\n"
               "fn fetch4(i: u32) -> vec4f { return d[i]; }",
    "uniform": f"@group(0) @binding(0) var<uniform> d: array<vec4f, {N}>;\n"
               "fn fetch4(i: u32) -> vec4f { return d[i]; }",
    "workgroup": "var<workgroup> w: array<vec4f, 1024>;\n"
                 "@group(0) @binding(0) var<storage, read> d: array<vec4f>;\n"
                 "fn fetch4(i: u32) -> vec4f { return w[i & 1023u]; }",
}

BODY = """
@group(0) @binding(1) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(THREADS)
fn main(@builtin(global_invocation_id) g: vec3u, @builtin(local_invocation_index) li: u32) {
    FILL
    var acc = vec4f(0.0);
    for (var k = 0u; k < LOADSu; k++) {
        acc += fetch4((k * 7u + LANE) & (NN - 1u));
    }
    out[g.x] = acc.x + acc.y + acc.z + acc.w;
}
"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=6)
    a = p.parse_args()
    import os
    import tempfile

    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="trifit-xdg-"))  # (Mesa's warning, as the engine)
    import wgpu

    adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    device = adapter.request_device_sync()
    print(f"# {adapter.summary}; {time.strftime('%Y-%m-%d %H:%M')}; each call {GROUPS * THREADS * LOADS / 1e6:.1f}M "
          f"vec4 loads; median (min-max) ms of {a.repeats - 1} calls after one")
    data = np.random.default_rng(0).random(N * 4, dtype=np.float32)
    out = device.create_buffer(size=GROUPS * THREADS * 4, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    for where, decl in BINDINGS.items():
        usage = wgpu.BufferUsage.UNIFORM if where == "uniform" else wgpu.BufferUsage.STORAGE
        src = device.create_buffer_with_data(data=data, usage=usage)
        for lane in ("li", "0u"):
            fill = ("for (var j = li; j < 1024u; j += THREADSu) { w[j] = d[j]; }\n    workgroupBarrier();"
                    if where == "workgroup" else "")
            code = decl + BODY.replace("FILL", fill).replace("THREADS", str(THREADS)).replace(
                "LOADS", str(LOADS)).replace("LANE", lane).replace("NN", f"{N}u")
            pipe = device.create_compute_pipeline(layout="auto", compute={
                "module": device.create_shader_module(code=code), "entry_point": "main"})
            group = device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[
                {"binding": 0, "resource": {"buffer": src, "offset": 0, "size": src.size}},
                {"binding": 1, "resource": {"buffer": out, "offset": 0, "size": out.size}}])
            times = []
            for _ in range(a.repeats):
                enc = device.create_command_encoder()
                cpass = enc.begin_compute_pass()
                cpass.set_pipeline(pipe)
                cpass.set_bind_group(0, group)
                cpass.dispatch_workgroups(GROUPS)
                cpass.end()
                t0 = time.perf_counter()
                device.queue.submit([enc.finish()])
                device.queue.read_buffer(out)
                times.append(1000 * (time.perf_counter() - t0))
            t = times[1:]
            index = "index by lane" if lane == "li" else "same index at every lane"
            print(f"{where:10s} {index:25s} {np.median(t):8.2f} ms ({min(t):.2f}-{max(t):.2f})", flush=True)


if __name__ == "__main__":
    main()
