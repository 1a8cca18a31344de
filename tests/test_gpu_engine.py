"""The GPU engine against the float64 reference (forward, loss, gradients), reproducibility,
batching and the buffer pool. Runs on whatever adapter wgpu finds (lavapipe in CI)."""

import numpy as np
import pytest

from trifit import BatchError, Engine, Scene, reference as R
from trifit.placement import removal_costs

pytestmark = pytest.mark.gpu

FWD_TOL = 2e-5
GRAD_TOL = 1e-4
COST_TOL = 1e-4  # removal costs (summed squared errors), relative to the largest


def _scene(n, W, H, seed, sigma_px, opacity=(0.2, 0.95)):
    s = Scene.random(n, W, H, seed=seed, sigma_px=sigma_px, opacity=opacity)
    if n >= 3:
        s.triangles[0, 2:4] = s.triangles[0, 0:2]                 # zero area: two equal vertices
        s.triangles[1, 4:6] = (s.triangles[1, 0:2] + s.triangles[1, 2:4]) / 2  # zero area: collinear
        s.triangles[2, 0:6:2] += 1.6                                # entirely right of the frame
    return s


SCENES = [  # (triangles, W, H, sigma px)
    (1, 17, 9, 1.5),
    (5, 64, 64, 1.5),
    (40, 48, 20, 0.2),     # tiny sigma, wide frame
    (40, 20, 48, 12.0),    # large sigma, tall frame
    (300, 40, 40, 1.0),
    (1100, 24, 30, 2.0),   # more triangles than one staging batch (256) or one bin round
]


def _groups(grad_t, grad_b):
    return {"vertices": grad_t[:, :6], "colours+opacity": grad_t[:, 6:], "background": grad_b}


def _rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


VARIANTS = {  # kernel variants: (subgroup reduction, segmented backward, backward pixels per thread)
    "subgroups": (True, False, 1),
    "workgroup-tree": (False, False, 1),
    "segmented": (True, True, 1),  # (segments of SHORT_SEGMENT_LEN: these frames are small)
    "segmented-32": (True, True, 1),  # (segments of SEGMENT_LEN, as frames of more than SHORT_SEGMENT_TILES tiles have)
    "4-pixels-per-thread": (True, False, 4),
    "8-pixels-per-thread-tree": (False, False, 8),
    "2-pixels-per-thread-tree-segmented": (False, True, 2),
}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("n, W, H, sp", SCENES)
def test_matches_reference(gpu_ctx, n, W, H, sp, variant, monkeypatch):
    subgroups, segmented, ppt = VARIANTS[variant]
    if variant == "segmented-32":
        from trifit.gpu import workspace

        monkeypatch.setattr(workspace, "SHORT_SEGMENT_TILES", 0)
        assert workspace.Shape(1, W, H, n).segment_len == workspace.SEGMENT_LEN
    if subgroups and not gpu_ctx.has_subgroups:
        subgroups = False  # the adapter lacks the feature: the portable variant stands in
    eng = Engine("gpu", subgroups=subgroups, segmented=segmented, pixels_per_thread=ppt)
    scene = _scene(n, W, H, seed=n + W, sigma_px=sp)
    img = eng.render(scene)
    ref = R.render(scene)
    assert img.shape == (H, W, 3) and img.dtype == np.float32
    assert np.abs(img - ref).max() <= FWD_TOL
    target = np.random.default_rng(n).uniform(0, 1, (H, W, 3))
    for loss in ("mse", "l1"):
        loss_g, grad = eng.loss_and_grad(scene, target, loss)
        loss_r, gt, gb = R.loss_and_grad(scene, target, loss)
        assert loss_g == pytest.approx(loss_r, rel=1e-5)
        ours = _groups(grad.triangles, grad.background)
        for name, want in _groups(gt, gb).items():
            assert _rel(ours[name], want) <= GRAD_TOL, (name, loss)
    _assert_removal_costs_match(eng, scene, target)


def test_segments_capped_by_memory_still_walk_the_whole_list(gpu_ctx, monkeypatch):
    """The segmented backward has at most Shape.n_seg segments (their checkpoints' memory is
    capped), so a tile list longer than n_seg * seg_len must end in one long bottom segment: every
    entry below still gets its gradient and the background its own. 200 faint triangles over most
    of the 64 x 64 frame make the middle tiles' lists 200 long; the cap is cut to two segments."""
    from trifit.gpu import workspace

    rng = np.random.default_rng(1)
    n = 200
    scene = Scene.random(n, 64, 64, seed=3)
    scene.triangles[:, 0:6] = np.array([0.05, 0.05, 0.95, 0.1, 0.5, 0.95]) + rng.normal(0, 0.1, (n, 6))
    scene.triangles[:, 9] = 0.05  # faint, so every pixel's walk goes down the whole list
    target = rng.uniform(0, 1, (64, 64, 3))
    loss_r, gt, gb = R.loss_and_grad(scene, target)
    monkeypatch.setattr(workspace, "SEGMENT_BUDGET_BYTES", 2 * 16 * 4096)  # two segments' checkpoints
    shape = workspace.Shape(1, 64, 64, n)
    assert shape.n_seg == 2 and shape.seg_len * 2 < n
    eng = Engine("gpu", subgroups=gpu_ctx.has_subgroups, segmented=True)
    loss_g, grad = eng.loss_and_grad(scene, target)
    assert loss_g == pytest.approx(loss_r, rel=1e-5)
    ours = _groups(grad.triangles, grad.background)
    for name, want in _groups(gt, gb).items():
        assert _rel(ours[name], want) <= GRAD_TOL, name
    _assert_removal_costs_match(eng, scene, target)


def test_subgroup_sums_by_any_number_of_transposing_exchanges(gpu_ctx, monkeypatch):
    """reduce_subgroup.wgsl's exchanges, every number of splits the adapter's subgroup can take
    (the probed size picks the most, up to 4; fewer are finished by plain exchange-adds; 0 is
    subgroupAdd), against the reference, at one and at 4 pixels a thread."""
    from trifit.gpu import shaders

    if not gpu_ctx.has_subgroups:
        pytest.fail(f"{gpu_ctx.describe()} has no subgroup operations: this test needs them")
    scene = _scene(300, 40, 40, seed=340, sigma_px=1.0)  # (test_matches_reference's scene of this size)
    target = np.random.default_rng(300).uniform(0, 1, (40, 40, 3))
    loss_r, gt, gb = R.loss_and_grad(scene, target, "mse")
    most = shaders.subgroup_splits(gpu_ctx.subgroup_size)
    for splits in range(most + 1):
        monkeypatch.setattr(shaders, "subgroup_splits", lambda size, k=splits: k)
        monkeypatch.setattr(shaders, "_pipelines", {})  # compile this variant (the usual ones come back after)
        for ppt in (1, 4, 8):
            eng = Engine("gpu", subgroups=True, pixels_per_thread=ppt)
            _, grad = eng.loss_and_grad(scene, target, "mse")
            ours = _groups(grad.triangles, grad.background)
            for name, want in _groups(gt, gb).items():
                assert _rel(ours[name], want) <= GRAD_TOL, (name, splits, ppt)


@pytest.mark.parametrize("n, W, H, sp", [(300, 70, 50, 1.0), (40, 130, 33, 0.2), (1100, 24, 30, 2.0)])
def test_every_binning_path_gives_the_same_bits(monkeypatch, gpu_ctx, n, W, H, sp):
    """The forward binning its own tiles (forward.wgsl), one binning pass of its own (bin.wgsl main)
    before the forward over its lists (forward_listed.wgsl), and two for big problems -- super-tiles,
    then each tile from its super-tile's list, in a pass of its own (coarse_main, fine_main,
    forward_listed.wgsl) or by the forward's workgroups (coarse_main, forward_fine.wgsl) -- list
    the same triangles in the same order: renders, losses, gradients (with a focus map too) and
    removal costs are the same bits. Forced here on small frames (edge super-tiles, one
    super-tile, lists of more than one round)."""
    from trifit.gpu import workspace

    scene = _scene(n, W, H, seed=n + W, sigma_px=sp)
    target = np.random.default_rng(n).uniform(0, 1, (H, W, 3))
    focus = np.random.default_rng(n + 1).uniform(0, 1, (H, W))
    got = {}
    for path, (tests, groups) in _BIN_PATHS.items():
        monkeypatch.setattr(workspace, "COARSE_BIN_TESTS", tests)
        monkeypatch.setattr(workspace, "FUSED_BIN_GROUPS", groups)
        eng = Engine("gpu")
        shape = workspace.Shape(1, W, H, n)
        assert shape.bin_path == path
        assert (shape.bins_in_forward, shape.coarse_bin, shape.fine_in_forward) == \
            (path == "forward", path.startswith(("two", "coarse")), path.startswith("coarse"))
        loss, grad = eng.loss_and_grad(scene, target, "mse")
        wloss, wgrad = eng.loss_and_grad(scene, target, "mse", weights=focus)  # (the focus variant's kernels)
        got[path] = (eng.render(scene).tobytes(), np.float64(loss).tobytes(), grad.triangles.tobytes(),
                     grad.background.tobytes(), eng.removal_costs(scene, target).tobytes(),
                     np.float64(wloss).tobytes(), wgrad.triangles.tobytes())
    assert got["forward"] == got["one pass"] == got["two passes"] == got["coarse, then the forward"]


#: (COARSE_BIN_TESTS, FUSED_BIN_GROUPS) forcing each binning path on any problem
_BIN_PATHS = {"forward": (1 << 62, 1 << 62), "one pass": (1 << 62, 0), "two passes": (0, 0),
              "coarse, then the forward": (0, 1 << 62)}


def test_the_binning_path_of_the_issue_19_cells():
    """The paths docs/ARCHITECTURE.md and docs/PERFORMANCE.md name for what users run: 512 px with
    1000 triangles bins in the forward from every triangle (three dispatches an iteration), with
    2000 from its super-tile's list after the super-tiles' pass (four), and 1024 px with 5000 in
    two passes of binning's own (five); a 176 px fit bins in the forward."""
    from trifit.gpu import workspace

    def path(side, tris, batch=1):
        return workspace.Shape(batch, side, side, tris).bin_path

    assert path(512, 1000) == "forward"
    assert path(512, 2000) == "coarse, then the forward"
    assert path(1024, 5000) == "two passes"
    assert path(176, 150) == "forward"
    assert path(512, 1000, batch=3) == "one pass"  # (3072 tile workgroups: a bin pass of its own)
    assert {len(steps) for steps in workspace.BIN_PATHS.values()} == {1, 2, 3}  # (+ backward, Adam: 3-5 a fit's)


def test_binning_paths_in_a_batch_and_their_limits(monkeypatch, gpu_ctx):
    """A batch bins each image's tiles apart on every path (the same bits); a count whose mask would
    not fit a tile's workgroup memory (fine_bin.wgsl) bins in one pass; the forward bins its tiles
    (from every triangle, or from the super-tiles' lists) up to FUSED_BIN_GROUPS tile workgroups
    (tiles x batch)."""
    from trifit.gpu import shaders, workspace

    scenes = [_scene(120, 70, 50, seed=s, sigma_px=1.0) for s in (1, 2, 3)]
    targets = np.random.default_rng(9).uniform(0, 1, (3, 50, 70, 3))
    got = {}
    for path, (tests, groups) in _BIN_PATHS.items():
        monkeypatch.setattr(workspace, "COARSE_BIN_TESTS", tests)
        monkeypatch.setattr(workspace, "FUSED_BIN_GROUPS", groups)
        losses, grads = Engine("gpu").loss_and_grad_many(scenes, targets)
        got[path] = (np.asarray(losses).tobytes(), *(g.triangles.tobytes() + g.background.tobytes() for g in grads))
    assert got["forward"] == got["one pass"] == got["two passes"] == got["coarse, then the forward"]
    monkeypatch.setattr(workspace, "COARSE_BIN_TESTS", 0)
    most = 32 * shaders.FINE_MASK_WORDS
    assert workspace.Shape(1, 64, 64, most).coarse_bin and not workspace.Shape(1, 64, 64, most + 1).coarse_bin
    monkeypatch.setattr(workspace, "COARSE_BIN_TESTS", 1 << 62)
    monkeypatch.setattr(workspace, "FUSED_BIN_GROUPS", 32)  # 16 tiles of 64 x 64: two images, not three
    assert workspace.Shape(2, 64, 64, 10).bins_in_forward and not workspace.Shape(3, 64, 64, 10).bins_in_forward
    monkeypatch.setattr(workspace, "COARSE_BIN_TESTS", 0)  # (and after the super-tiles' pass)
    assert workspace.Shape(2, 64, 64, 10).fine_in_forward and not workspace.Shape(3, 64, 64, 10).fine_in_forward


def test_a_fits_iteration_bins_inside_its_forward(monkeypatch, gpu_ctx):
    """A fit iteration's dispatches: where the forward bins its own tiles (and starts the
    iteration) a small problem's iteration is three dispatches; the other paths bin in passes of
    their own (the first starting the iteration), and the forward walks their lists or, after the
    super-tiles' pass, bins its tiles from theirs."""
    from trifit import Fitter
    from trifit.gpu import shaders, workspace

    target = np.random.default_rng(5).uniform(0, 1, (40, 56, 3)).astype(np.float32)
    end = ["backward.wgsl:main", "adam.wgsl:main"]
    want = {"forward": ["forward.wgsl:fit_main", *end],
            "one pass": ["bin.wgsl:fit_main", "forward_listed.wgsl:main", *end],
            "two passes": ["bin.wgsl:coarse_fit_main", "bin.wgsl:fine_main", "forward_listed.wgsl:main", *end],
            "coarse, then the forward": ["bin.wgsl:coarse_fit_main", "forward_fine.wgsl:main", *end]}
    scenes = set()
    for path, (tests, groups) in _BIN_PATHS.items():
        monkeypatch.setattr(workspace, "COARSE_BIN_TESTS", tests)
        monkeypatch.setattr(workspace, "FUSED_BIN_GROUPS", groups)
        f = Fitter(target, triangles=40, size=56, seed=3, engine=Engine("gpu"), strategy="fixed")
        f.step(30)
        labels = [pl.label for pl, _, _ in f._loop._iteration_dispatches().dispatches]
        fused = f._loop.shape.fuses_backward  # (a CPU adapter's: one segment a tile)
        assert fused == (path == "forward" and not f._loop.shape.segmented)
        assert labels == (["forward_backward.wgsl:fit_main", "adam.wgsl:main"] if fused else want[path])
        # what the fit built ahead (path_entries) is what it dispatches, on this path and outside a fit
        built = {f"{kernel}:{entry}" for kernel, entry in workspace.path_entries(f._loop.shape)}
        unfused = want[path][:-2]
        assert set(unfused) <= built and len(built) == len(unfused) + 1  # (+ the first's plain entry)
        assert shaders.built(*f._loop.ws._variant("forward_backward.wgsl", "fit_main")) or not fused
        scenes.add(f.scene.to_json())
        f.close()
    assert len(scenes) == 1  # the same scene bytes on every path


def test_subgroup_splits_follow_the_lane_bits():
    from trifit.gpu import shaders

    assert [shaders.subgroup_splits(n) for n in (0, 1, 2, 4, 8, 16, 32, 64, 128, 48)] == [0, 0, 1, 2, 3, 4, 4, 4, 4, 0]
    source = shaders.kernel_source("backward.wgsl", True, 4, 32, 1)
    assert "const SG_SIZE: u32 = 32u;" in source and "const SG_SPLITS: u32 = 4u;" in source


def _assert_removal_costs_match(eng, scene, target):
    """The backward's removal-cost mode against render/placement.py's float64 version."""
    want = removal_costs(scene.triangles, scene.background, scene.sigma, target)
    got = eng.removal_costs(scene, target)
    assert got.shape == (scene.n_triangles,)
    assert np.abs(got - want).max() <= COST_TOL * max(np.abs(want).max(), 1.0)
    # and the mode is switched back: gradients again on the next call
    _, grad = eng.loss_and_grad(scene, target)
    _, gt, _ = R.loss_and_grad(scene, target)
    assert _rel(grad.triangles, gt) <= GRAD_TOL


def _deep_opaque_scene():
    """150 faint triangles, every tenth opaque: the walks reach the bottom of the list, through
    nearly opaque entries in every staged round of the backward."""
    scene = Scene.random(150, 32, 32, seed=4, size=(0.5, 1.0), sigma_px=0.7, opacity=(0.02, 0.06))
    scene.triangles[::10, 9] = 1.0
    return scene


@pytest.mark.parametrize("segmented, ppt, deep", [(False, 1, False), (True, 1, False), (False, 4, False),
                                                  (False, 8, False), (False, 1, True), (True, 1, True),
                                                  (False, 4, True), (True, 8, True)])
@pytest.mark.parametrize("below", ["engine", "fit"])
def test_opaque_stacks_use_the_recompositing_path(monkeypatch, gpu_ctx, segmented, ppt, deep, below):
    """Nearly opaque triangles' gradients and removal costs match the float64 reference, at the
    engine's re-compositing threshold and at a fit's (FitSettings.recompute_below, where opacities
    from 0.97 up to 1 - 1/1024 divide rather than re-composite)."""
    from trifit.fitloop import FitSettings
    from trifit.gpu import workspace

    if below == "fit":
        assert FitSettings().recompute_below < 0.03 < workspace.RECOMPUTE_BELOW  # (the case it is)
        monkeypatch.setattr(workspace, "RECOMPUTE_BELOW", FitSettings().recompute_below)
    gpu_engine = Engine("gpu", segmented=segmented, pixels_per_thread=ppt)
    # opacity 1 makes 1 - alpha ~ 0 inside: division is unusable, the backward must re-composite
    scene = _deep_opaque_scene() if deep else Scene.random(60, 32, 32, seed=4, sigma_px=0.7, opacity=(0.97, 1.0))
    target = np.random.default_rng(1).uniform(0, 1, (32, 32, 3))
    assert np.abs(gpu_engine.render(scene) - R.render(scene)).max() <= FWD_TOL
    _, grad = gpu_engine.loss_and_grad(scene, target)
    _, gt, gb = R.loss_and_grad(scene, target)
    for name, want in _groups(gt, gb).items():
        assert _rel(_groups(grad.triangles, grad.background)[name], want) <= GRAD_TOL, name
    _assert_removal_costs_match(gpu_engine, scene, target)


def test_pixels_per_thread_is_checked(gpu_ctx):
    with pytest.raises(ValueError, match="1, 2, 4 or 8"):
        Engine("gpu", pixels_per_thread=3)


@pytest.mark.parametrize("n, W, H, sp", [(150, 70, 50, 1.0), (600, 130, 33, 0.3), (40, 24, 30, 2.0)])
def test_renders_through_the_forward_give_render_wgsls_bits(monkeypatch, gpu_ctx, n, W, H, sp):
    """Where the kernels walk several pixels a thread (CPU adapters) a render walks the forward's
    binning path without the loss; with one pixel a thread it is render.wgsl's own walk. On CPU
    adapters the two give the same bits (a single render and a batch of three); a GPU's compiler
    may round them differently (the H200: up to ~4e-6)."""
    from trifit.gpu import workspace

    used = []
    bind = workspace.Workspace.bind_group
    monkeypatch.setattr(workspace.Workspace, "bind_group",
                        lambda self, kernel, *a, **kw: used.append(kernel) or bind(self, kernel, *a, **kw))
    scenes = [_scene(n, W, H, seed=n + b, sigma_px=sp * (1 + 0.5 * b)) for b in range(3)]
    got = {}
    for ppt in (1, 4):
        eng = Engine("gpu", pixels_per_thread=ppt)
        assert workspace.Shape(1, W, H, n, eng.impl.segmented, ppt).renders_in_forward == (ppt > 1)
        used.clear()
        got[ppt] = (eng.render(scenes[0]).tobytes(), eng.render_many(scenes, W, H).tobytes())
        assert ("render.wgsl" in used) == (ppt == 1) and ("forward.wgsl" in used) == (ppt > 1), sorted(set(used))
    if gpu_ctx.info.get("type") == "CPU":
        assert got[1] == got[4]
    else:
        for a, b in zip(got[1], got[4]):
            np.testing.assert_allclose(np.frombuffer(a, np.float32), np.frombuffer(b, np.float32), rtol=0, atol=1e-5)


def test_scene_records_take_a_uniform_binding_where_they_fit():
    from trifit.gpu import shaders, workspace

    assert workspace.Shape(1, 70, 50, 150, False, 4).scene_uniform  # 150 triangles: ~6 KB of records
    assert not workspace.Shape(1, 70, 50, 150, True, 1).scene_uniform  # one pixel a thread: GPUs
    big = workspace.Shape(1, 70, 50, 2000, False, 4)  # 2000 triangles: ~80 KB, more than a binding holds
    assert big.batch * big.scene_stride * 4 > shaders.SCENE_UNIFORM_BYTES and not big.scene_uniform


@pytest.mark.parametrize("layout", ["scene_uniform", "serial_lanes", "hands_off", "fuses_loss_pass",
                                    "defers_recompose", "skips_by_vector", "spreads_cells"])
def test_cpu_adapters_layouts_give_the_gpu_layouts_bits(monkeypatch, gpu_ctx, layout):
    """Seven ways of arranging the same arithmetic that several pixels a thread (CPU adapters)
    take: the scene records read from a uniform binding where the batch's fit one
    (Shape.scene_uniform) where GPUs read them from storage; the gradient reduction's lanes run in
    turn in one thread (reduce_param.wgsl SERIAL_LANES) where GPUs run them as threads; the
    fused kernel hands its pixels' colour and dL/dC from the forward to the backward in the
    thread (HANDED_OFF) where GPUs go through memory; a loss pass outside a fit walks the
    forward and the backward in that one kernel (Shape.fuses_loss_pass) where GPUs dispatch them
    apart; and the backward re-composites beneath nearly opaque entries outside its loop over
    entries (backward_walk.wgsl DEFER_RECOMPOSE) where GPUs do it inside; and the walks skip, a
    subgroup at a time, the entries none of its pixels can reach (VECTOR_SKIP) where GPUs' subgroups
    branch around them; and the workgroups take their tiles in a spread order (common.wgsl
    spread_cell) where GPUs take them in row order. The same floats and
    additions in the same order, so on a CPU adapter the same bits -- a render, a batch of
    renders, a loss and gradient (reduce.wgsl), removal costs, both on a stack of nearly opaque
    triangles too, and a fit loop (adam.wgsl, forward_backward.wgsl). A GPU's compiler may round
    the two programs differently."""
    from trifit import Fitter
    from trifit.gpu import shaders, workspace

    if layout == "fuses_loss_pass":
        assert workspace.Shape(1, 70, 50, 150, False, 8).fuses_loss_pass
        assert not workspace.Shape(1, 70, 50, 150, True, 1).fuses_loss_pass
    elif layout != "scene_uniform":
        named = ("forward_backward.wgsl",) if layout in ("hands_off", "skips_by_vector", "spreads_cells") else ()
        assert getattr(shaders, layout)(*named, 8)
        assert not getattr(shaders, layout)(*named, 1)
        if layout == "skips_by_vector":  # (render-only walks keep every entry)
            assert not shaders.skips_by_vector("forward.wgsl", 8) and shaders.skips_by_vector("backward.wgsl", 8)
        if layout == "spreads_cells":  # (the walking and binning kernels; the reduction's are not tiles)
            assert not shaders.spreads_cells("adam.wgsl", 8) and shaders.spreads_cells("bin.wgsl", 8)
    W, H = 70, 50
    scenes = [_scene(150, W, H, seed=7 + b, sigma_px=0.6 * (1 + b)) for b in range(3)]
    target = np.random.default_rng(5).uniform(0, 1, (H, W, 3)).astype(np.float32)
    got, seen = {}, []
    bind = workspace.Workspace.bind_group
    monkeypatch.setattr(workspace.Workspace, "bind_group",
                        lambda self, *a, **kw: seen.append((self.scene_uniform, a[0])) or bind(self, *a, **kw))
    for cpu_layout in (True, False):
        if not cpu_layout:  # the GPUs' layout with the same walks: a pipeline cache of its own
            if layout == "scene_uniform":
                monkeypatch.setattr(shaders, "SCENE_UNIFORM_BYTES", 0)
            elif layout == "fuses_loss_pass":  # (a fit's iterations fused still, as on GPUs)
                fused = workspace.Shape.fuses_loss_pass.fget
                monkeypatch.setattr(workspace.Shape, "fuses_loss_pass",
                                    property(lambda s, fused=fused: s.fit and fused(s)))
            else:
                monkeypatch.setattr(shaders, layout, lambda *a: False)
            monkeypatch.setattr(shaders, "_pipelines", {})
        eng = Engine("gpu", pixels_per_thread=8, segmented=False)  # (a CPU adapter's kernels on any adapter)
        seen.clear()
        loss, grad = eng.loss_and_grad(scenes[0], target)
        costs = eng.removal_costs(scenes[1], target)
        opaque = Scene.random(60, W, H, seed=4, sigma_px=0.7, opacity=(0.97, 1.0))  # (re-composites)
        _, opaque_grad = eng.loss_and_grad(opaque, target)
        f = Fitter(target, triangles=40, size=W, seed=3, engine=eng, strategy="fixed")
        f.step(12)
        got[cpu_layout] = (eng.render(scenes[0]).tobytes(), eng.render_many(scenes, W, H).tobytes(), loss,
                           grad.triangles.tobytes(), grad.background.tobytes(), np.asarray(costs).tobytes(),
                           f.scene.triangles.tobytes(), np.asarray(f.history.losses).tobytes(),
                           opaque_grad.triangles.tobytes(), np.asarray(eng.removal_costs(opaque, target)).tobytes())
        f.close()
        if layout == "scene_uniform":
            assert seen and {uniform for uniform, _ in seen} == {cpu_layout}
        if layout == "fuses_loss_pass":  # (the loss and the removal costs: backward.wgsl or not)
            assert ("backward.wgsl" in {kernel for _, kernel in seen}) != cpu_layout
    if gpu_ctx.info.get("type") == "CPU":
        assert got[True] == got[False]
    else:  # (the calls' float32 outputs; a fit's scene may drift further over its iterations)
        assert got[True][2] == pytest.approx(got[False][2], rel=1e-5)
        for a, b in zip(got[True][:6], got[False][:6]):
            np.testing.assert_allclose(np.frombuffer(a, np.float32) if isinstance(a, bytes) else a,
                                       np.frombuffer(b, np.float32) if isinstance(b, bytes) else b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nx, ny", [(11, 11), (6, 6), (5, 4), (32, 24), (1, 7), (2, 1)])
def test_spread_cells_are_a_permutation_whose_runs_cover_the_frame(gpu_ctx, nx, ny):
    """common.wgsl spread_cell with the frame's stride (shaders.spread_stride), as CPU adapters'
    kernels take it: every cell exactly once, and each contiguous run of workgroups -- what
    llvmpipe gives one of its threads -- takes cells from all over the frame, not a band of rows
    (the rows' mean near the frame's middle for 2, 4 and 8 runs)."""
    import wgpu

    from trifit.gpu import layouts, shaders

    n = nx * ny
    src = shaders.compose(layouts.kernel_layouts(), [
        ("common", shaders.source("common.wgsl")), ("constants", "const SPREAD_CELLS: bool = true;\n"),
        ("kernel", f"""@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn main(@builtin(workgroup_id) group: vec3u) {{
    let c = spread_cell(group, {nx}u, {n}u, {shaders.spread_stride(n)}u);
    out[group.y * {nx}u + group.x] = c.y * {nx}u + c.x;
}}""")])
    dev = gpu_ctx.device
    buf = dev.create_buffer(size=4 * n, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    pl = dev.create_compute_pipeline(layout="auto", compute={"module": dev.create_shader_module(code=src),
                                                              "entry_point": "main"})
    bg = dev.create_bind_group(layout=pl.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": buf}}])
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass()
    cp.set_pipeline(pl)
    cp.set_bind_group(0, bg)
    cp.dispatch_workgroups(nx, ny)
    cp.end()
    dev.queue.submit([enc.finish()])
    cells = np.frombuffer(dev.queue.read_buffer(buf), np.uint32)
    assert sorted(cells.tolist()) == list(range(n))
    if n < 3:
        assert cells.tolist() == list(range(n))  # (too few to spread)
        return
    assert cells.tolist() != list(range(n))
    for runs in (2, 4, 8):
        if n >= 4 * runs and ny >= 4:
            for part in np.array_split(cells, runs):
                assert abs(np.mean(part // nx) - (ny - 1) / 2) < 0.2 * ny, (runs, part)


def test_bit_reproducible(gpu_engine):
    scene = Scene.random(500, 64, 48, seed=9)
    target = np.random.default_rng(2).uniform(0, 1, (48, 64, 3))
    l1, g1 = gpu_engine.loss_and_grad(scene, target)
    l2, g2 = gpu_engine.loss_and_grad(scene, target)
    assert l1 == l2
    assert np.array_equal(g1.triangles, g2.triangles) and np.array_equal(g1.background, g2.background)
    assert np.array_equal(gpu_engine.render(scene), gpu_engine.render(scene))


def test_batch_equals_single_calls_and_ragged_is_refused(gpu_engine):
    scenes = [Scene.random(20, 40, 24, seed=s, sigma_px=1.0 + s) for s in range(3)]
    many = gpu_engine.render_many(scenes, 40, 24)
    for b, s in enumerate(scenes):
        np.testing.assert_array_equal(many[b], gpu_engine.render(s))
    targets = np.random.default_rng(3).uniform(0, 1, (3, 24, 40, 3))
    losses, grads = gpu_engine.loss_and_grad_many(scenes, targets)
    for b, s in enumerate(scenes):
        lb, gb = gpu_engine.loss_and_grad(s, targets[b])
        assert losses[b] == pytest.approx(lb, rel=1e-6)
        np.testing.assert_allclose(grads[b].triangles, gb.triangles, rtol=1e-5, atol=1e-9)
    with pytest.raises(BatchError, match="ragged"):
        gpu_engine.render_many([scenes[0], Scene.random(21, 40, 24)], 40, 24)


def test_render_at_other_sizes_matches_reference(gpu_engine):
    s = Scene.random(30, 30, 20, seed=6, sigma_px=1.0)
    assert np.abs(gpu_engine.render(s, 45, 17) - R.render(s, 45, 17)).max() <= FWD_TOL


def test_repeated_call_allocates_nothing(gpu_engine):
    scene = Scene.random(33, 40, 30, seed=1)
    target = np.random.default_rng(0).uniform(0, 1, (30, 40, 3))
    gpu_engine.loss_and_grad(scene, target)
    before = gpu_engine.pool_stats()
    gpu_engine.loss_and_grad(scene, target)
    after = gpu_engine.pool_stats()
    assert after["misses"] == before["misses"] and after["bytes"] == before["bytes"]


def test_auto_picks_the_gpu_and_says_which(gpu_ctx):
    eng = Engine("auto")
    assert eng.backend == "gpu"
    assert eng.adapter["name"] and eng.adapter["type"] in ("CPU", "DiscreteGPU", "IntegratedGPU", "VirtualGPU", "Unknown")
    assert eng.adapter["name"] in eng.description


def test_timings_name_every_pass(gpu_ctx):
    gpu_engine = Engine("gpu")  # (its own: the session's engine keeps the timings of every test's calls)
    scene = Scene.random(10, 32, 32, seed=1)
    gpu_engine.loss_and_grad(scene, np.zeros((32, 32, 3)))
    t = gpu_engine.timings()
    assert {"pack", "upload", "submit", "readback"} <= set(t["host_ms"])
    if gpu_ctx.has_pass_timestamps:
        # one dispatch for the forward and the backward where the call's shape fuses them (CPU adapters)
        from trifit.gpu.workspace import Shape

        impl = gpu_engine.impl
        fused = Shape(1, 32, 32, 10, impl.segmented, impl.pixels_per_thread).fuses_loss_pass
        walks = {"forward+backward"} if fused else {"forward", "backward"}
        assert walks | {"reduce"} <= set(t["gpu_ms"])
        assert "loss" not in t["gpu_ms"]  # (the reduction's first workgroup sums the loss)
        assert "bin" not in t["gpu_ms"]  # (a small problem: the forward bins its tiles)
        assert all(v >= 0 for v in t["gpu_ms"].values())
        gpu_engine.impl.mse_batch(np.asarray(scene.triangles)[None], np.asarray(scene.background)[None],
                                  [scene.sigma], np.zeros((1, 32, 32, 3)))
        assert "loss" in gpu_engine.timings()["gpu_ms"]  # a loss without a gradient sums it in a pass of its own


def test_naive_baseline_kernel_matches_reference(gpu_engine):
    # the baseline `trifit bench` compares the tiled kernels against must itself be right
    s = _scene(40, 30, 22, seed=3, sigma_px=1.2)
    img = gpu_engine.impl.render_batch(s.triangles[None], s.background[None], [s.sigma], 30, 22, naive=True)[0]
    assert np.abs(img - R.render(s)).max() <= FWD_TOL


def test_culling_stays_within_the_forward_tolerance(gpu_engine):
    # T opaque white triangles just beyond the cull reach of one pixel centre (black background):
    # the GPU skips every one there, the reference does not. The reach rule (ln(T / 1e-5) sigma)
    # bounds what they add up to; a shorter reach would put them closer and fail this.
    from trifit.gpu.workspace import cull_sigmas

    T, W, H, sigma_px = 400, 48, 48, 0.5
    dist = 1.02 * cull_sigmas(T) * sigma_px         # just beyond the reach, pixel units
    p = np.array([24.5, 24.5])
    angles = np.linspace(0, 2 * np.pi, T, endpoint=False)
    u = np.stack([np.cos(angles), np.sin(angles)], 1)
    v = np.stack([-u[:, 1], u[:, 0]], 1)
    tip = p + u * dist                               # the vertex nearest p
    verts = np.stack([tip, tip + u * 0.5 + v * 0.2, tip + u * 0.5 - v * 0.2], 1) / [W, H]
    tris = np.concatenate([verts.reshape(T, 6), np.ones((T, 4))], 1)
    scene = Scene(W, H, sigma_px / min(W, H), np.zeros(3), tris)
    ref = R.render(scene)
    img = gpu_engine.render(scene)
    assert ref[24, 24].max() > 1e-6                 # they do add up to something at that pixel
    assert np.abs(img - ref).max() <= FWD_TOL
