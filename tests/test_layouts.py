"""The data layouts shared by Python and WGSL (render/gpu/layouts.py): offsets and sizes by WGSL's
alignment rules, packing, the generated WGSL, the kernels' composition from files, and -- on the
adapter -- that the WGSL compiler puts every field where the layout says."""

from __future__ import annotations

import math
import os
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from trifit.fitloop import Schedule
from trifit.gpu import layouts, shaders
from trifit.gpu.layouts import FRAME, OPTIM, SCENE, SCHEDULE, STATE, Struct

ROOT = Path(__file__).resolve().parents[1]

# a vec4 after three scalars (a gap of 4), a vec2, a vec3 with a scalar in its last 4 bytes
MIXED = Struct("Mixed", [("a", "f32"), ("b", "u32"), ("c", "f32"), ("v", "vec4f"), ("w", "vec2f"),
                         ("s", "f32"), ("t", "vec3f"), ("u", "i32"), ("z", "f32")], "uniform")


def _offsets(s: Struct) -> dict[str, int]:
    return {f.name: f.offset for f in s.fields}


def test_kernel_struct_offsets_and_sizes():
    assert _offsets(FRAME) == {n: 4 * i for i, n in enumerate(
        ["width", "height", "n_tris", "batch", "tiles_x", "tiles_y", "n_tiles", "scene_stride", "mask_words",
         "loss_kind", "inv_values", "stop_t", "cull_k", "recompute_below", "ring_len", "with_loss", "n_seg",
         "seg_len", "removal_costs", "tile_spread", "super_spread"])}
    assert FRAME.size == 96  # 21 scalars = 84 bytes, padded to a multiple of 16 for a uniform
    assert _offsets(STATE) == {"iter": 0, "sigma": 4, "lr_scale": 8} and STATE.size == 12  # storage: no 16 pad
    assert _offsets(SCHEDULE) == {n: 4 * i for i, n in enumerate(
        ["sigma_start", "sigma_end", "sigma_iters", "lr_decay_iters", "lr_final", "iter_offset", "lr_offset",
         "lr_start"])} and SCHEDULE.size == 32
    assert list(_offsets(OPTIM).values()) == [0, 4, 8, 12, 16, 20, 24, 28] and OPTIM.size == 32


def test_alignment_rules_by_hand():
    assert _offsets(MIXED) == {"a": 0, "b": 4, "c": 8, "v": 16, "w": 32, "s": 40, "t": 48, "u": 60, "z": 64}
    assert MIXED.align == 16 and MIXED.size == 80  # end 68 rounded up to 16
    storage = Struct("S", [("x", "f32"), ("y", "vec2f"), ("z", "f32")], "storage")
    assert _offsets(storage) == {"x": 0, "y": 8, "z": 16} and storage.align == 8 and storage.size == 24
    uniform = Struct("U", [("x", "f32"), ("y", "vec2f"), ("z", "f32")], "uniform")
    assert uniform.size == 32  # the same members, padded to 16 for uniform use
    assert Struct("V", [("x", "f32"), ("t", "vec3<f32>")], "storage").size == 32  # vec3 aligns to 16
    for bad in ([("x", "f64")], [("x", "f32"), ("x", "u32")], [("_pad0", "u32")], []):
        with pytest.raises(ValueError):
            Struct("Bad", bad)


def test_app_uniforms():
    if os.environ.get("CI", "").lower() == "true":
        import trifit.app.panes as panes  # CI has PySide6: a missing one is a failure there
    else:
        panes = pytest.importorskip("trifit.app.panes")
    assert _offsets(panes.VIEW) == {"pane_a": 0, "pane_b": 16, "image_size": 32, "mode": 40, "split": 44,
                                    "flags": 48, "line_px": 52, "band": 64, "outlines": 80, "edit_flags": 84,
                                    "outline_px": 88, "handle_px": 92, "surface": 96}
    assert panes.VIEW.size == 112 and panes.UNPACK_SIZE.size == 16
    # the bytes the canvas wrote by hand before (struct View, "<4f4f2fIfIf2f"), then edit mode's
    packed = panes.VIEW.pack(pane_a=(1, 2, 3, 4), pane_b=(5, 6, 7, 8), image_size=(48, 36), mode=2,
                             split=0.25, flags=5, line_px=2.5, band=(9, 10, 11, 12), outlines=3, edit_flags=2,
                             outline_px=1.5, handle_px=3.5, surface=(640, 480))
    assert packed == struct.pack("<4f4f2fIfIf2f4fIIff2f8x", 1, 2, 3, 4, 5, 6, 7, 8, 48, 36, 2, 0.25, 5, 2.5, 0, 0,
                                 9, 10, 11, 12, 3, 2, 1.5, 3.5, 640, 480)
    assert panes.UNPACK_SIZE.pack(width=640, height=480, first=921600) == struct.pack("<3I4x", 640, 480, 921600)
    for name, s in (("display.wgsl", panes.VIEW), ("unpack.wgsl", panes.UNPACK_SIZE)):
        text = (ROOT / "app" / name).read_text()
        assert s.name not in layouts.declared_structs(text), f"app/{name} spells struct {s.name}"
        assert layouts.declared_structs(panes.shader_source(name)).count(s.name) == 1


def test_pack_round_trip_and_hand_bytes():
    values = dict(zip(FRAME.names, [3, 5, 7, 2, 1, 1, 1, 74, 1, 1, 1 / 45, 1e-30, 13.7, 1 / 16, 256, 1, 3, 32, 1,
                                    5, 1]))
    packed = FRAME.pack(values)
    assert packed == struct.pack("<10I4f7I12x", *values.values())  # the workspace's former hand packing
    back = FRAME.unpack(packed)
    assert back == {k: (float(np.float32(v)) if FRAME.field(k).wgsl == "f32" else v) for k, v in values.items()}
    mixed = {"a": 1.5, "b": 7, "c": -2.0, "v": (1, 2, 3, 4), "w": (5, 6), "s": 0.5, "t": (7, 8, 9), "u": -3, "z": 9.0}
    data = MIXED.pack(**mixed)
    assert len(data) == 80 and data[12:16] == bytes(4) and data[68:] == bytes(12)  # padding is zero
    assert MIXED.unpack(data) == {k: (tuple(float(x) for x in v) if isinstance(v, tuple) else v)
                                  for k, v in mixed.items()}
    sched = Schedule(0.03, 0.005, 700, 1000, 0.1, 3, 5, 0.7)
    assert set(sched.pack()) == set(SCHEDULE.names)  # the dataclass and the layout name the same fields
    assert SCHEDULE.pack(sched.pack()) == np.array([0.03, 0.005, 700, 1000, 0.1, 3, 5, 0.7], np.float32).tobytes()


def test_pack_refuses_mistakes():
    with pytest.raises(KeyError, match="missing 'lr_scale'"):
        STATE.pack(iter=1, sigma=0.1)
    with pytest.raises(KeyError, match="unknown 'lr'"):
        STATE.pack(iter=1, sigma=0.1, lr_scale=1.0, lr=2.0)
    with pytest.raises(TypeError, match="State.iter"):
        STATE.pack(iter=1.5, sigma=0.1, lr_scale=1.0)
    with pytest.raises(ValueError, match="vec4f"):
        MIXED.pack(a=0, b=0, c=0, v=(1, 2, 3), w=(0, 0), s=0, t=(0, 0, 0), u=0, z=0)
    assert STATE.pack_at(iter=7) == (0, struct.pack("<I", 7))
    assert STATE.pack_at(lr_scale=0.5, sigma=2.0) == (4, struct.pack("<2f", 2.0, 0.5))
    with pytest.raises(ValueError, match="consecutive"):
        STATE.pack_at(iter=1, lr_scale=0.5)


def _members(wgsl: str, name: str) -> list[tuple[str, str]]:
    body = re.search(rf"struct {name} \{{(.*?)\n\}}", wgsl, re.S).group(1)
    return re.findall(r"^\s*(\w+): ([\w<>]+),", body, re.M)


@pytest.mark.parametrize("s", [FRAME, STATE, SCHEDULE, OPTIM, MIXED], ids=lambda s: s.name)
def test_generated_wgsl_has_every_field_in_order(s):
    members = _members(s.wgsl(), s.name)
    assert [m for m in members if not m[0].startswith("_pad")] == [(f.name, f.wgsl) for f in s.fields]
    assert 4 * sum(1 for n, _ in members if n.startswith("_pad")) + sum(f.size for f in s.fields) == s.size


def test_generated_padding_sits_in_the_gaps():
    names = [n for n, _ in _members(MIXED.wgsl(), "Mixed")]
    assert names == ["a", "b", "c", "_pad0", "v", "w", "s", "_pad1", "t", "u", "z", "_pad2", "_pad3", "_pad4"]
    assert [n for n, _ in _members(FRAME.wgsl(), "Frame")][-4:] == ["super_spread", "_pad0", "_pad1", "_pad2"]


def test_scene_record():
    T = 3
    assert SCENE.stride(T) == 34 and SCENE.at("background", T) == 30 and SCENE.at("sigma", T) == 33
    rng = np.random.default_rng(0)
    tris, bg, sig = rng.random((2, T, 10)), rng.random((2, 3)), rng.random(2)
    rec = SCENE.pack(tris, bg, sig)
    assert rec.dtype == np.float32 and rec.shape == (2, 34)
    assert rec[1, 30:33].tolist() == bg[1].astype(np.float32).tolist() and rec[1, 33] == np.float32(sig[1])
    t2, b2, s2 = SCENE.unpack(rec, T)
    assert np.array_equal(t2, tris.astype(np.float32)) and np.array_equal(b2, bg.astype(np.float32))
    assert np.array_equal(s2, sig.astype(np.float32))
    text = SCENE.wgsl()
    assert "const TRI_FLOATS: u32 = 10u;" in text
    assert re.search(r"fn record_background\(.*\n.*frame\.n_tris \* TRI_FLOATS \+ 0u;", text)
    assert re.search(r"fn record_sigma\(.*\n.*frame\.n_tris \* TRI_FLOATS \+ 3u;", text)
    with pytest.raises(KeyError):
        SCENE.at("alpha", T)


def test_no_wgsl_file_spells_a_generated_struct():
    generated = {s.name for s in layouts.KERNEL_STRUCTS}
    for path in sorted((ROOT / "shaders").glob("*.wgsl")):
        spelled = generated.intersection(layouts.declared_structs(path.read_text()))
        assert not spelled, f"{path.name} spells {spelled}"


@pytest.mark.parametrize("name", sorted(shaders.PIECES))
def test_kernels_are_composed_from_files(name):
    src = shaders.kernel_source(name, subgroups=True, kb=4, subgroup_size=32, ppt=2)
    declared = layouts.declared_structs(src)
    for s in layouts.KERNEL_STRUCTS:
        assert declared.count(s.name) == 1, s.name
    order = [src.index("struct Frame {"), src.index("fn record_sigma("), src.index("// ---- shaders/common.wgsl")]
    order += [src.index(f"// ---- shaders/{p}") for p in shaders.PIECES[name] if p not in shaders.PLACEHOLDERS]
    order.append(src.index(f"// ---- shaders/{name}"))
    assert order == sorted(order)
    # the scene records' binding comes from the scene piece only, in either form
    reads = src.count("var<storage, read> scene: array<f32>") + src.count("var<uniform> scene_u:")
    assert reads == 1 if shaders.SCENE in shaders.PIECES[name] else reads <= 1 and "scene_u" not in src


def test_reduction_variant_and_shared_pieces():
    sub = shaders.kernel_source("backward.wgsl", subgroups=True, kb=2)
    tree = shaders.kernel_source("backward.wgsl", subgroups=False, kb=2)
    assert "reduce_subgroup.wgsl" in sub and "reduce_workgroup.wgsl" not in sub
    assert "reduce_workgroup.wgsl" in tree and "subgroupAdd" not in tree
    from trifit.gpu.workspace import reduce_groups

    for kernel in ("adam.wgsl", "reduce.wgsl"):  # the dispatch and the kernels share one constant
        for ppt in (1, 8):
            src = shaders.kernel_source(kernel, False, ppt=ppt)
            assert f"const PARAMS_PER_GROUP: u32 = {shaders.params_per_group(ppt)}u;" in src
            assert f"const SERIAL_LANES: bool = {str(ppt > 1).lower()};" in src
    # GPUs: SUM_LANES threads a parameter; CPU adapters: one, running the lanes in turn
    assert 256 // shaders.PARAMS_PER_GROUP == shaders.SUM_LANES
    assert shaders.SERIAL_PARAMS_PER_GROUP <= 256
    for ppt in (1, 2, 8):
        per = shaders.params_per_group(ppt)  # the triangles' workgroups, then the background's
        assert per % 10 == 0  # whole triangles: adam.wgsl's size rates read vertices only their workgroup writes
        assert [reduce_groups(n, ppt) for n in (0, 1, per // 10 + 1, 1000)] == [1, 2, 3, -(-10_000 // per) + 1]
    # the reduction's pipelines are variants of it (their workgroups' layout)
    assert shaders._variant(None, "adam.wgsl", "main", True, 16384, 8, 8, False)[0] != \
        shaders._variant(None, "adam.wgsl", "main", True, 16384, 8, 1, False)[0]
    adam = shaders.kernel_source("adam.wgsl", subgroups=False)
    assert "fn reduce_param(" in adam and "fn reduce_grad(" not in adam  # the function, not the other kernel
    with pytest.raises(ValueError, match="unknown kernel"):
        shaders.kernel_source("nope.wgsl", subgroups=False)


def test_staging_variant_follows_pixels_per_thread():
    # one pixel a thread stages set-up records; several stage the plain record, set up per thread
    for ppt, piece, other in ((1, "stage_setup.wgsl", "stage_tri.wgsl"), (4, "stage_tri.wgsl", "stage_setup.wgsl"),
                              (8, "stage_tri.wgsl", "stage_setup.wgsl")):
        st = shaders.staging(ppt)
        assert st.pieces[-1] == piece
        for kernel, stage, bstage in (("forward.wgsl", st.forward, None), ("forward_listed.wgsl", st.forward, None),
                                      ("forward_fine.wgsl", st.forward, None), ("backward.wgsl", None, st.backward),
                                      ("forward_backward.wgsl", st.forward, st.backward)):
            src = shaders.kernel_source(kernel, subgroups=False, ppt=ppt)
            assert f"// ---- shaders/{piece}" in src and f"// ---- shaders/{other}" not in src
            assert (f"const STAGE: u32 = {stage}u;" in src) == ("const STAGE:" in src) == (stage is not None)
            assert (f"const BSTAGE: u32 = {bstage}u;" in src) == (bstage is not None)


def test_scene_piece_binds_the_records_as_storage_or_uniform():
    readers = [k for k, pieces in shaders.PIECES.items() if "scene_access.wgsl" in pieces]
    assert readers and all(shaders.SCENE in shaders.PIECES[k] for k in readers)
    for kernel in readers:
        storage = shaders.kernel_source(kernel, subgroups=True, subgroup_size=8, ppt=8)
        uniform = shaders.kernel_source(kernel, subgroups=True, subgroup_size=8, ppt=8, scene_uniform=True)
        assert "// ---- shaders/scene_storage.wgsl" in storage and "// ---- shaders/scene_uniform.wgsl" not in storage
        assert "// ---- shaders/scene_uniform.wgsl" in uniform and "// ---- shaders/scene_storage.wgsl" not in uniform
        assert f"const SCENE_VEC4S: u32 = {shaders.SCENE_UNIFORM_BYTES // 16}u;" in uniform
        body = uniform.split("// ---- shaders/scene_uniform.wgsl")[1]
        assert "scene[" not in body.replace("scene_u[", "")  # every read goes through scene_at
    # a pipeline is a variant of it only where the kernel reads the records
    assert shaders._variant(None, "forward.wgsl", "main", True, 16384, 8, 8, False, True)[0] != \
        shaders._variant(None, "forward.wgsl", "main", True, 16384, 8, 8, False, False)[0]
    assert shaders._variant(None, "adam.wgsl", "main", True, 16384, 8, 8, False, True)[0] == \
        shaders._variant(None, "adam.wgsl", "main", True, 16384, 8, 8, False, False)[0]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 16, 20, 36, 64, 121, 168, 1024, 4096, 65535, 65536])
def test_spread_stride_is_coprime_and_near_n_over_the_golden_ratio(n):
    """The frame's stride of the tiles' spread order (common.wgsl spread_cell): coprime with the
    cells' count, so the order is a permutation, and the first such from n / golden ratio up; row
    order (1) where there are too few cells to spread or w x stride could leave a u32."""
    s = shaders.spread_stride(n)
    if n < 3 or n > 65535:
        assert s == 1
        return
    assert math.gcd(s, n) == 1 and (n - 1) * s < 2 ** 32
    assert max(n * 618 // 1000, 1) <= s and all(math.gcd(t, n) > 1 for t in range(max(n * 618 // 1000, 1), s))
    assert sorted(w * s % n for w in range(n)) == list(range(n))


def test_removal_costs_are_a_pipeline_variant_only_where_the_kernels_walk_several_pixels():
    """On CPU adapters pruning's removal-cost walk is its own pipeline, so a fit's iterations carry
    none of its arithmetic; GPUs read the frame's flag in one pipeline (shaders.costs_by_variant)."""
    def key(kernel, ppt, costs):
        return shaders._variant(None, kernel, "main", True, 16384, 8, ppt, False, False, costs)[0]

    for kernel in ("backward.wgsl", "forward_backward.wgsl"):
        assert key(kernel, 8, True) != key(kernel, 8, False)
        assert key(kernel, 1, True) == key(kernel, 1, False)
        for ppt in (1, 8):
            for costs in (False, True):
                src = shaders.kernel_source(kernel, subgroups=True, subgroup_size=8, ppt=ppt, costs=costs)
                assert f"const COSTS_BY_VARIANT: bool = {str(ppt > 1).lower()};" in src
                assert f"const COSTS_VARIANT: bool = {str(costs).lower()};" in src
    for kernel in ("forward.wgsl", "adam.wgsl"):  # (no backward walk: nothing to vary)
        assert key(kernel, 8, True) == key(kernel, 8, False)
        assert "COSTS_VARIANT" not in shaders.kernel_source(kernel, subgroups=True, subgroup_size=8, ppt=8, costs=True)


def test_only_the_cpu_adapters_fused_kernel_hands_its_pixels_to_its_backward():
    for kernel in ("forward.wgsl", "forward_listed.wgsl", "forward_fine.wgsl", "backward.wgsl", "forward_backward.wgsl"):
        for ppt in (1, 8):
            src = shaders.kernel_source(kernel, subgroups=True, subgroup_size=8, ppt=ppt)
            on = kernel == "forward_backward.wgsl" and ppt > 1
            assert f"const HANDED_OFF: bool = {str(on).lower()};" in src


def test_cpu_walks_share_reads_over_subgroups_of_eight_and_count_their_stop_once_a_round():
    # what every lane reads alike is read once a lane and shared, where subgroups have at least 8 lanes
    for subgroups, size, ppt, stop, piece in ((True, 8, 8, "walk_stop_round", "stage_tri_shared"),
                                              (True, 16, 4, "walk_stop_round", "stage_tri_shared"),
                                              (True, 4, 8, "walk_stop_round", "stage_tri"),
                                              (False, 8, 8, "walk_stop_round", "stage_tri"),
                                              (True, 32, 1, "walk_stop_pixel", "stage_setup")):
        for kernel in ("forward.wgsl", "backward.wgsl", "forward_backward.wgsl"):
            src = shaders.kernel_source(kernel, subgroups=subgroups, subgroup_size=size, ppt=ppt)
            assert src.index(f"// ---- shaders/{stop}.wgsl") < src.index(f"// ---- shaders/{piece}.wgsl")
            assert src.count("// ---- shaders/walk_stop_") == 1 and src.count("// ---- shaders/stage_") == 1
    # a forward kernel's pipeline is a variant of the subgroup setting too (it picks the staging piece)
    assert shaders._variant(None, "forward.wgsl", "main", True, 16384, 8, 8, False)[0] != \
        shaders._variant(None, "forward.wgsl", "main", False, 16384, 8, 8, False)[0]
    assert shaders._variant(None, "adam.wgsl", "main", True, 16384, 8, 1, False)[0] == \
        shaders._variant(None, "adam.wgsl", "main", False, 16384, 8, 1, False)[0]


def test_a_file_spelling_a_generated_struct_is_refused():
    spelled = "struct Frame {\n    width: u32,\n    height: f32,\n}\n"
    with pytest.raises(ValueError, match=r"shaders/extra\.wgsl spells struct Frame"):
        shaders.compose(layouts.kernel_layouts(), [("shaders/extra.wgsl", spelled)])
    shaders.compose(layouts.kernel_layouts(), [("shaders/extra.wgsl", "struct Other {\n    x: u32,\n}\n")])


def _echo(gpu_ctx, s: Struct, values: dict) -> np.ndarray:
    """Run a kernel that copies every component of a ``s`` value, bound as ``s.usage``, into a u32
    array in field order: what the WGSL compiler made of the layout."""
    import wgpu

    exprs = []
    for f in s.fields:
        for i in range(f.type.count):
            e = f"v.{f.name}" + (f"[{i}]" if f.type.count > 1 else "")
            exprs.append(e if f.type.component == "<u4" else f"bitcast<u32>({e})")
    space = "uniform" if s.usage == "uniform" else "storage, read"
    code = s.wgsl() + f"@group(0) @binding(0) var<{space}> v: {s.name};\n" \
        "@group(0) @binding(1) var<storage, read_write> out: array<u32>;\n" \
        "@compute @workgroup_size(1)\nfn main() {\n" + \
        "".join(f"    out[{k}] = {e};\n" for k, e in enumerate(exprs)) + "}\n"
    device = gpu_ctx.device
    usage = wgpu.BufferUsage.UNIFORM if s.usage == "uniform" else wgpu.BufferUsage.STORAGE
    src = device.create_buffer_with_data(data=s.pack(values), usage=usage)
    out = device.create_buffer(size=4 * len(exprs), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    pl = device.create_compute_pipeline(layout="auto", compute={
        "module": device.create_shader_module(code=code), "entry_point": "main"})
    bg = device.create_bind_group(layout=pl.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": src}}, {"binding": 1, "resource": {"buffer": out}}])
    enc = device.create_command_encoder()
    cpass = enc.begin_compute_pass()
    cpass.set_pipeline(pl)
    cpass.set_bind_group(0, bg)
    cpass.dispatch_workgroups(1)
    cpass.end()
    device.queue.submit([enc.finish()])
    return np.frombuffer(device.queue.read_buffer(out), np.uint32)


def _expected(s: Struct, values: dict) -> list[int]:
    out = []
    for f in s.fields:
        for x in np.atleast_1d(values[f.name]):
            out.append(int(np.array(x, f.type.component).view(np.uint32)))
    return out


@pytest.mark.parametrize("s", [MIXED, FRAME, STATE, OPTIM,
                               Struct("MixedS", [(f.name, f.wgsl) for f in MIXED.fields], "storage")],
                         ids=lambda s: s.name)
def test_the_wgsl_compiler_agrees(gpu_ctx, s):
    values, k = {}, 1
    for f in s.fields:  # distinct numbers in every component
        comps = [k + i for i in range(f.type.count)]
        k += f.type.count
        comps = [{"<f4": c + 0.25, "<i4": -c, "<u4": c}[f.type.component] for c in comps]
        values[f.name] = comps[0] if f.type.count == 1 else tuple(comps)
    assert _echo(gpu_ctx, s, values).tolist() == _expected(s, values)
