"""Events on the device (#19): what a fit reads back, sigma probes' errors summed on the device,
and placement on the device (``placement="device"``: tile error sums, the host's sample of tiles,
the device's pixel choice and patch statistics) checked against the host's versions."""

from __future__ import annotations

import numpy as np
import pytest

from trifit import Fitter, Scene, placement as P, reference as R
from trifit.fitloop import FitSettings
from trifit.strategy import probe_errors

EVENTFUL = dict(coarse_min_size=16, growth_until=0.3, prune_cycle_min=12, respawn_every=7,
                sigma_probes=3, host_snapshot_every=40)
RESPAWNING = dict(EVENTFUL, respawn_alpha=0.3)  # (a threshold that flags some: every kind of event happens)


def _target(W=64, H=48, seed=3):
    truth = Scene.random(30, W, H, seed=seed, sigma_px=1.2)
    return np.clip(R.render(truth) + np.random.default_rng(seed).normal(0, 0.02, (H, W, 3)), 0, 1)


def _tile_sums(err: np.ndarray) -> np.ndarray:
    H, W = err.shape
    ty, tx = -(-H // 16), -(-W // 16)
    pad = np.zeros((ty * 16, tx * 16))
    pad[:H, :W] = err
    return pad.reshape(ty, 16, tx, 16).sum(axis=(1, 3)).ravel()


def _tile_order(H: int, W: int) -> np.ndarray:
    """Flat pixel indices in tile order (tiles row-major, pixels row-major inside each)."""
    out = []
    for ty in range(-(-H // 16)):
        for tx in range(-(-W // 16)):
            ys, xs = np.mgrid[ty * 16:min(ty * 16 + 16, H), tx * 16:min(tx * 16 + 16, W)]
            out.append((ys * W + xs).ravel())
    return np.concatenate(out)


# ---------------------------------------------------------------------- the host's half
def test_two_level_sampling_is_sampling_by_error_in_tile_order():
    rng = np.random.default_rng(0)
    H, W = 37, 45  # partial tiles at the right and bottom edges
    err = rng.exponential(1.0, (H, W))
    err[:16, :16] = 0.0  # a tile with nothing but the floor
    sums = _tile_sums(err)
    floor = P.error_floor(sums, H, W)
    assert floor == pytest.approx(1e-6 * err.mean(), rel=1e-9)  # error_map's floor
    assert P.tile_pixels(H, W).sum() == H * W
    u = rng.random(3000)
    tile, frac, _ = P.sample_tiles(sums, H, W, u)
    got = np.array([np.ravel_multi_index(P.pick_in_tile(err, t, f, floor), (H, W)) for t, f in zip(tile, frac)])
    order = _tile_order(H, W)
    cdf = np.cumsum(err.ravel()[order] + floor)
    pos = u * cdf[-1]
    want = order[np.searchsorted(cdf, pos, side="right")]
    clear = np.min(np.abs(cdf[None, :] - pos[:, None]), axis=1) > 1e-9 * cdf[-1]
    assert clear.sum() > 2990 and np.array_equal(got[clear], want[clear])
    assert np.count_nonzero(tile == 0) < 5  # the empty tile is (almost) never picked


# ---------------------------------------------------------------------- the device's half
def _placement(gpu_engine, targets, images, weights=None):
    import wgpu

    dp = gpu_engine.impl.placement(targets.astype(np.float32), weights)
    buf = gpu_engine.impl.device.create_buffer_with_data(data=np.ascontiguousarray(images, dtype=np.float32).tobytes(),
                                                         usage=wgpu.BufferUsage.STORAGE)
    return dp, buf


@pytest.mark.gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_tile_error_sums_are_the_host_error_maps(gpu_engine, weighted):
    rng = np.random.default_rng(1)
    B, H, W = 2, 37, 45
    targets = rng.uniform(0, 1, (B, H, W, 3)).astype(np.float32)
    images = rng.uniform(0, 1, (B, H, W, 3)).astype(np.float32)
    weights = rng.uniform(0, 1, (B, H, W)) if weighted else None
    dp, buf = _placement(gpu_engine, targets, images, weights)
    try:
        sums = dp.error_tiles(buf)
    finally:
        dp.release()
    for b in range(B):
        err = P.error_map(targets[b].astype(np.float64), images[b].astype(np.float64),
                          weights=None if weights is None else weights[b].astype(np.float32).astype(np.float64))
        floor = 1e-6 * max(np.mean(err - 0), 1e-12)  # error_map adds its floor; take it off again
        np.testing.assert_allclose(sums[b], _tile_sums(err) - floor * P.tile_pixels(H, W), rtol=2e-5)


@pytest.mark.gpu
def test_device_picks_and_shapes_are_the_hosts(gpu_engine):
    H, W = 48, 64
    target = _target(W, H).astype(np.float32)
    image = np.clip(R.render(Scene.random(8, W, H, seed=9, sigma_px=1.5)), 0, 1).astype(np.float32)
    image[:16, :16] = target[:16, :16]  # a tile with no residual: the random rule there
    dp, buf = _placement(gpu_engine, target[None], image[None])
    try:
        sums = dp.error_tiles(buf)
        rng = np.random.default_rng(4)
        n = 48
        rec = P.device_records(0, n, sums[0], H, W, rng, FitSettings(triangles=30), 0.6, 30)
        rec[0, 1], rec[0, 2] = np.uint32(0).view(np.float32), 0.5  # the flat tile
        rec[1, 5] = 90.0  # a window wider than the frame (read every pixel, clipped)
        out = dp.place(buf, rec)
    finally:
        dp.release()
    err = np.sum((target.astype(np.float64) - image) ** 2, axis=-1)
    residual = (target - image).astype(np.float64)
    floor = float(rec[0, 10])
    clear = 0
    for i in range(n):
        tile, frac = int(rec[i, 1].view(np.uint32)), float(rec[i, 2])
        y, x = P.pick_in_tile(err, tile, frac, floor)
        ty, tx = (tile // -(-W // 16)) * 16, (tile % -(-W // 16)) * 16
        run = np.cumsum(err[ty:ty + 16, tx:tx + 16].ravel() + floor)
        if np.min(np.abs(run - frac * run[-1])) > 1e-5 * run[-1]:  # no float32 tie: the same pixel
            clear += 1
            assert int(out[i, 11]) == y * W + x, i
        pix = int(out[i, 11])
        y, x = divmod(pix, W)
        cx, cy, r_px, ang0 = x + float(rec[i, 3]), y + float(rec[i, 4]), float(rec[i, 5]), float(rec[i, 6])
        want = P.shape_to_residual(target.astype(np.float64), residual, cx, cy, r_px, ang0)
        got = out[i].astype(np.float64)
        if want is None:
            assert got[10] == 0.0, i
            angles = ang0 + np.array([0, 2, 4]) * np.pi / 3 + rec[i, 7:10].astype(np.float64)
            np.testing.assert_allclose(got[0:6:2], (cx + np.cos(angles) * r_px) / W, atol=2e-5)
            np.testing.assert_allclose(got[1:6:2], (cy + np.sin(angles) * r_px) / H, atol=2e-5)
            np.testing.assert_allclose(got[6:9], target[y, x], atol=1e-6)
            np.testing.assert_allclose(got[9], r_px, rtol=1e-6)
            continue
        assert got[10] == 1.0, i
        pd, ph = got[:6].reshape(3, 2) * [W, H], want[0].reshape(3, 2) * [W, H]
        # the triangle's centroid and second moments (an eigenvector's sign may differ: the same moments)
        np.testing.assert_allclose(pd.mean(axis=0), ph.mean(axis=0), atol=2e-3)
        cov = [(lambda d: d.T @ d / 12)(p - p.mean(axis=0)) for p in (pd, ph)]
        np.testing.assert_allclose(cov[0], cov[1], atol=2e-3 * max(1.0, np.abs(cov[1]).max()))
        np.testing.assert_allclose(got[6:9], want[1], atol=2e-4)
        np.testing.assert_allclose(got[9], want[2], rtol=1e-3)
    assert out[0, 10] == 0.0 and out[1, 10] == 1.0
    assert clear >= n - 3


@pytest.mark.gpu
def test_rows_placed_on_the_device_are_the_hosts_rows(gpu_engine):
    # what a gather takes, turned on the device from the placed triangles (placed_rows), against
    # the host's turn of the same triangles read back: each image's larger ones first, raw
    # parameters (logits), then the values they materialise to
    from trifit.fitloop import raw_triangles
    from trifit.fitstate import fresh_rows

    rng = np.random.default_rng(4)
    B, H, W = 3, 40, 56
    targets = rng.uniform(0, 1, (B, H, W, 3)).astype(np.float32)
    targets[0, :8] = 1.0  # (colours at 1: logits clamped as the host clamps them)
    images = rng.uniform(0, 1, (B, H, W, 3)).astype(np.float32)
    dp, buf = _placement(gpu_engine, targets, images)
    try:
        sums = dp.error_tiles(buf)
        counts = [5, 0, 9]
        rec = np.concatenate([P.device_records(b, k, sums[b], H, W, np.random.default_rng(b), FitSettings(triangles=20))
                              for b, k in enumerate(counts)])
        placed = dp.place(buf, rec)
        rows = dp.place_rows(buf, rec, 0.15)
        got = dp._submit_read(gpu_engine.impl.device.create_command_encoder(), rows.buffer, len(rows) * 80)
    finally:
        dp.release()
    want, at = [], 0
    for k in counts:
        want.append(fresh_rows(raw_triangles(P.device_triangles(placed[at:at + k], 0.15, min(H, W)))))
        at += k
    want = np.concatenate(want)
    got = got.reshape(len(rows), 20)
    assert len(rows) == sum(counts)
    np.testing.assert_array_equal(got[:, :6], want[:, :6])   # vertices as placed, in the host's order
    np.testing.assert_allclose(got[:, 6:10], want[:, 6:10], rtol=2e-5, atol=2e-5)  # logits in float32
    np.testing.assert_allclose(got[:, 10:], want[:, 10:], rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
def test_growth_and_respawn_on_the_device_read_back_no_triangles(gpu_engine):
    # placed on the device, the new triangles go to the gather as rows there: each placement
    # reads back only the tiles' error sums, which come with the chunk before it
    f = _eventful_fitter(gpu_engine, **{**RESPAWNING, "placement": "device", "sigma_probes": 0,
                                        "host_snapshot_every": 0})
    reads = []
    dp_cls = type(f.device_placement())
    real = dp_cls._submit_read
    dp_cls._submit_read = lambda self, *a: reads.append(a[-1]) or real(self, *a)
    try:
        f.step(60)
    finally:
        dp_cls._submit_read = real
    assert f.respawned > 0 and reads == [], reads
    f.close()


@pytest.mark.gpu
def test_device_placement_follows_the_error_like_the_host(gpu_engine):
    # 400 triangles into a frame whose error is all in its left third: both placements put them there
    H, W = 48, 96
    target = np.full((H, W, 3), 0.5, np.float32)
    target[:, : W // 3] = (0.9, 0.2, 0.1)
    image = np.full_like(target, 0.5)
    dp, buf = _placement(gpu_engine, target[None], image[None])
    try:
        rec = P.device_records(0, 400, dp.error_tiles(buf)[0], H, W, np.random.default_rng(0), FitSettings(triangles=50))
        dev = P.device_triangles(dp.place(buf, rec), 0.15, H)
    finally:
        dp.release()
    host = P.new_triangles(target.astype(np.float64), 400, image.astype(np.float64), np.random.default_rng(0),
                           FitSettings(triangles=50))
    for tris in (dev, host):
        centres = tris[:, :6].reshape(-1, 3, 2).mean(axis=1)[:, 0] * W
        assert np.mean(centres < W / 3 + 2) > 0.97
        np.testing.assert_allclose(np.median(tris[:, 6:9], axis=0), (0.9, 0.2, 0.1), atol=0.02)
        assert np.all(tris[:, 9] == 0.15)
    sizes = [np.median(np.ptp(t[:, :6].reshape(-1, 3, 2), axis=1)) for t in (dev, host)]
    assert sizes[0] == pytest.approx(sizes[1], rel=0.1)


# ---------------------------------------------------------------------- probes and readback
@pytest.mark.gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_probe_errors_on_the_device_are_the_references(gpu_engine, ref_engine, weighted):
    rng = np.random.default_rng(2)
    H, W = 30, 40
    scenes = [Scene.random(9, W, H, seed=s, sigma_px=1.0 + s) for s in range(3)]
    tris = np.stack([s.triangles for s in scenes])
    bg = np.stack([s.background for s in scenes])
    sig = np.array([s.sigma for s in scenes])
    targets = rng.uniform(0, 1, (3, H, W, 3))
    weights = rng.uniform(0, 1, (3, H, W)) if weighted else None
    got = gpu_engine.impl.mse_batch(tris, bg, sig, targets, weights=weights)
    ref = ref_engine.impl.mse_batch(tris, bg, sig, targets, weights=weights)
    np.testing.assert_allclose(got, ref, rtol=2e-5)
    renders = np.stack([R.render(s) for s in scenes])
    np.testing.assert_allclose(ref, probe_errors(renders[:, None], targets, weights)[:, 0], rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("placement", ["host", "device"])
def test_what_an_eventful_fit_reads_back(gpu_engine, placement):
    before = gpu_engine.counters()
    f = Fitter(_target(), triangles=24, size=64, seed=5, engine=gpu_engine, placement=placement, **RESPAWNING)
    f.plan(150)
    f.step(150)
    got = {k: v - before[k] for k, v in gpu_engine.counters().items()}
    assert f.respawned > 0 and f.strategy.probes_done == 3
    kinds = [k for k in got if k.startswith("readback_") and k != "readback_bytes"]
    assert sum(got[k] for k in kinds) == got["readback_bytes"]
    assert got["readback_snapshot_bytes"] > 0
    if placement == "device":  # no state, image or render: every event's work is on the device
        assert got["readback_state_bytes"] == got["readback_image_bytes"] == got["readback_render_bytes"] == 0
        assert got["readback_events_bytes"] > 0
        assert got["readback_bytes"] / 150 < 1024
    else:  # the state; the last forward's image; the half-size stage's growth renders at full size
        assert got["readback_state_bytes"] > 0 and got["readback_image_bytes"] >= 64 * 48 * 12
        assert got["readback_render_bytes"] >= 64 * 48 * 12
    f.close()


@pytest.mark.gpu
def test_chunks_that_wrap_the_loss_ring_read_back_their_own_losses(gpu_engine):
    # 600 iterations of 100 and of 37: chunks straddle the 256-entry ring's end; one iteration a
    # chunk never does. Every chunk reads back 4 bytes an iteration (plus the sampled timestamps).
    histories = []
    for chunk in (1, 100, 37):
        f = Fitter(_target(24, 18), triangles=6, size=24, seed=1, engine=gpu_engine, strategy="fixed", chunk=chunk)
        before = gpu_engine.counters()["readback_losses_bytes"]
        f.step(600)
        losses = gpu_engine.counters()["readback_losses_bytes"] - before
        assert 600 * 4 <= losses <= 600 * 4 + -(-600 // chunk) * f._loop.backend.timer.capacity * 8
        histories.append(np.asarray(f.history.losses))
        f.close()
    assert len(histories[0]) == 600
    assert all(np.array_equal(h, histories[0]) for h in histories[1:])


# ---------------------------------------------------------------------- respawn on the device
def _eventful_fitter(engine, **settings):
    f = Fitter(_target(), triangles=24, size=64, seed=5, engine=engine, **{**EVENTFUL, **settings})
    f.plan(150)
    return f


@pytest.mark.gpu
def test_respawn_flags_on_the_device_are_the_strategys_rule(gpu_engine):
    f = _eventful_fitter(gpu_engine, placement="device", respawn_alpha=0.3)  # a threshold that flags some
    f.step(60)
    tris = f._loop_values()[0]  # the records the device holds, as the host reads them
    want = f.strategy.stopped_contributing(tris)
    got = f.stopped_on_device(0.3)
    assert any(len(w) for w in want) and sum(len(w) for w in want) < f.n_triangles
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    f.close()


@pytest.mark.gpu
def test_respawn_checks_come_back_with_the_chunk_and_fit_the_same(gpu_engine, monkeypatch):
    from trifit.strategy import DefaultStrategy

    runs = []
    for folded in (True, False):
        if not folded:  # every check its own submission and readback, as before
            monkeypatch.setattr(DefaultStrategy, "respawn_rule", lambda self, iteration: None)
        before = gpu_engine.counters()
        f = _eventful_fitter(gpu_engine, placement="device")
        f.step(150)
        got = {k: v - before[k] for k, v in gpu_engine.counters().items()}
        runs.append((f.scene.triangles.tobytes(), f.respawned, got["submissions"], got["readback_events_bytes"]))
        f.close()
    (scene_a, respawned_a, subs_a, events_a), (scene_b, respawned_b, subs_b, events_b) = runs
    assert scene_a == scene_b and respawned_a == respawned_b > 0
    assert subs_a < subs_b and events_a == events_b  # the same flags, fewer round trips


@pytest.mark.gpu
def test_error_sums_come_back_with_the_chunk_and_fit_the_same(gpu_engine, monkeypatch):
    """An event that may place brings its tiles' error sums back with the chunk's losses (in the
    half-size stage, of a full-size render encoded there too); placement then starts from them,
    with no pass and readback of its own -- and fits the same bytes as with the sums read apart."""
    from trifit.gpu import events
    from trifit.gpu.fitloop import GpuFitLoop

    apart = []
    real = events.DevicePlacement.error_tiles

    def counted(self, image):
        apart.append(1)
        return real(self, image)

    monkeypatch.setattr(events.DevicePlacement, "error_tiles", counted)
    runs = []
    for folded in (True, False):
        if not folded:  # the sums that came back ignored: each placement sums and reads apart, as before
            monkeypatch.setattr(GpuFitLoop, "tile_sums", lambda self, placement: None)
        apart.clear()
        before = gpu_engine.counters()
        f = _eventful_fitter(gpu_engine, placement="device")
        f.step(150)
        got = {k: v - before[k] for k, v in gpu_engine.counters().items()}
        runs.append((f.scene.triangles.tobytes(), f.respawned, got["submissions"], len(apart)))
        f.close()
    (scene_a, respawned_a, subs_a, apart_a), (scene_b, respawned_b, subs_b, apart_b) = runs
    assert scene_a == scene_b and respawned_a == respawned_b > 0
    # (each sum read apart was a submission of its own, and in the half-size stage its render another)
    assert apart_a == 0 < apart_b and subs_a < subs_b - apart_b


@pytest.mark.gpu
def test_error_sums_brought_back_are_dropped_when_the_image_changes(gpu_engine):
    f = _eventful_fitter(gpu_engine, placement="device")
    dp = f.device_placement()
    f.step(3)
    assert f.coarse  # a half-size loop: the sums are of a full-size render of its records
    f._loop.run(2, sums=dp)
    sums, image = f._loop.tile_sums(dp)
    assert image is not f._loop.image_buffer()
    assert np.array_equal(sums, dp.error_tiles(f._loop.render_on_device(f.width, f.height)))
    f.step(60)
    loop = f._loop
    assert not f.coarse
    loop.run(5, sums=dp)
    image = loop.image_buffer()
    assert image is not None
    sums, of = loop.tile_sums(dp)
    assert of is image and np.array_equal(sums, dp.error_tiles(image))  # the sums of the image the loop holds
    loop.run(1)
    assert loop.tile_sums(dp) is None  # another forward since
    loop.run(5, sums=dp)
    raw, m, v = loop.get_state()
    loop.set_state(raw, m, v)
    assert loop.image_buffer() is None and loop.tile_sums(dp) is None
    f.close()


@pytest.mark.gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_removal_costs_come_back_with_the_chunk_and_fit_the_same(gpu_engine, monkeypatch, weighted):
    """A pruning event's removal costs come back with the chunk before it (the passes encoded
    after its iterations), so pruning ranks without a pass and readback of its own -- and fits the
    same bytes as with the costs computed apart."""
    from trifit.gpu.backend import GpuBackend
    from trifit.gpu.fitloop import GpuFitLoop

    apart = []
    real = GpuBackend.removal_costs_records

    def counted(self, *args, **kw):
        apart.append(1)
        return real(self, *args, **kw)

    monkeypatch.setattr(GpuBackend, "removal_costs_records", counted)
    weights = np.random.default_rng(2).uniform(0.2, 1.0, (48, 64)) if weighted else None
    runs = []
    for folded in (True, False):
        if not folded:  # the costs that came back ignored: each pruning computes them apart, as before
            monkeypatch.setattr(GpuFitLoop, "removal_costs", lambda self, targets, weights: None)
        apart.clear()
        before = gpu_engine.counters()
        f = _eventful_fitter(gpu_engine, placement="device", weights=weights)
        f.step(150)
        got = {k: v - before[k] for k, v in gpu_engine.counters().items()}
        runs.append((f.scene.triangles.tobytes(), got["submissions"], len(apart)))
        f.close()
    (scene_a, subs_a, apart_a), (scene_b, subs_b, apart_b) = runs
    assert scene_a == scene_b
    # (the run's end keeps the count by removal cost too: finish() is no event, and computes apart)
    assert apart_a <= 1 < apart_b and subs_a == subs_b - (apart_b - apart_a)


@pytest.mark.gpu
def test_removal_costs_brought_back_are_the_ones_computed_apart_and_go_stale(gpu_engine):
    f = _eventful_fitter(gpu_engine, placement="device")
    f.step(60)
    loop = f._loop
    loop.run(5, costs=(f.targets, f.focus))
    got = loop.removal_costs(f.targets, f.focus)
    apart = gpu_engine.impl.removal_costs_records(loop.records_buffer(), f.n_triangles,
                                                  np.asarray(loop.sigmas, float), f.targets)
    assert got is not None and np.array_equal(got, apart)
    assert loop.removal_costs(f.targets.copy(), f.focus) is None  # other targets
    loop.run(1)
    assert loop.removal_costs(f.targets, f.focus) is None  # another iteration since
    loop.run(5, costs=(f.targets, f.focus))
    raw, m, v = loop.get_state()
    loop.set_state(raw, m, v)
    assert loop.removal_costs(f.targets, f.focus) is None  # the records were written since
    f.close()


@pytest.mark.gpu
def test_a_fits_targets_go_up_once_for_its_removal_costs(gpu_engine):
    """Pruning's removal costs pass the fit's (read-only) targets at every step: a workspace that
    holds them already uploads them no more, with the same costs; a writable array goes up every
    time, so a change in place is seen; another array replaces them."""
    backend = gpu_engine.impl
    f = _eventful_fitter(gpu_engine, placement="device")
    f.step(60)
    assert not f.targets.flags.writeable
    loop = f._loop
    args = (loop.records_buffer(), f.n_triangles, np.asarray(loop.sigmas, float))
    target_bytes = f.targets.nbytes

    def costs(targets):
        before = backend.counters.upload_bytes
        got = backend.removal_costs_records(*args, targets)
        return got, backend.counters.upload_bytes - before

    first, _ = costs(f.targets)
    again, up = costs(f.targets)
    assert np.array_equal(first, again) and up < target_bytes  # (the record sigmas, not the images)
    writable = f.targets.copy()
    same, up = costs(writable)
    assert np.array_equal(first, same) and up >= target_bytes
    writable[:] = 0.0  # changed in place: uploaded again, and the costs follow
    zero, up = costs(writable)
    assert up >= target_bytes and not np.array_equal(zero, first)
    back, up = costs(f.targets)  # the fit's own again, after another array went up
    assert np.array_equal(back, first) and up >= target_bytes
    f.close()


@pytest.mark.gpu
def test_flags_brought_back_are_dropped_when_the_records_change(gpu_engine):
    f = _eventful_fitter(gpu_engine, placement="device", respawn_alpha=0.3)
    f.step(60)
    loop = f._loop
    rule = (0.3, f.width, f.height)
    loop.run(5, flags=rule)
    kept = loop.stopped_contributing(*rule)
    subs = gpu_engine.counters()["submissions"]
    assert np.array_equal(loop.stopped_contributing(*rule), kept)
    assert gpu_engine.counters()["submissions"] == subs  # the chunk's flags: no round trip
    raw, m, v = loop.get_state()
    raw = raw.reshape(-1, raw.shape[-1])  # (images, parameters)
    raw[0, 9:120:10] = -20.0  # the first 12 triangles all but transparent
    loop.set_state(raw, m, v)
    fresh = loop.stopped_contributing(*rule)
    assert gpu_engine.counters()["submissions"] > subs and fresh[0, :12].all() and not np.array_equal(fresh, kept)
    assert np.array_equal(loop.stopped_contributing(0.3, f.width, f.height), fresh)
    f.close()


@pytest.mark.gpu
def test_removal_costs_from_the_records_are_the_hosts(gpu_engine, monkeypatch):
    from trifit.fitstate import FitState

    f = _eventful_fitter(gpu_engine, placement="device")
    f.step(40)
    before = gpu_engine.counters()["readback_state_bytes"]
    device = f.removal_costs()
    assert gpu_engine.counters()["readback_state_bytes"] == before  # from the records: no state back
    monkeypatch.setattr(FitState, "places_on_device", property(lambda self: False))
    host = f.removal_costs()
    # (a slot a replica; the first's triangles all help, where another replica's may not)
    assert device.shape == host.shape == (f.batch, f.n_triangles) and np.all(host[0] > 0)
    np.testing.assert_allclose(device, host, rtol=1e-3, atol=1e-6 * host.max())
    f.close()


@pytest.mark.gpu
@pytest.mark.parametrize("weighted", [False, True])
def test_sigma_probes_from_the_records_are_the_hosts(gpu_engine, monkeypatch, weighted):
    from trifit.fitstate import FitState

    weights = np.linspace(0.2, 1.0, 64 * 48).reshape(48, 64) if weighted else None
    f = _eventful_fitter(gpu_engine, placement="device", weights=weights)
    f.step(40)
    factors = np.exp([-0.2, 0.0, 0.2])
    before = gpu_engine.counters()["readback_state_bytes"]
    device = f.sigma_errors(factors)
    assert gpu_engine.counters()["readback_state_bytes"] == before
    # a probe batch too large for a device buffer goes in halves, still from the records
    from trifit.errors import AdapterError

    whole = type(gpu_engine.impl).mse_records

    def one_at_a_time(self, records, n_tris, which, *args, **kwargs):
        if len(which) > 1:
            raise AdapterError("(a buffer too large)")
        return whole(self, records, n_tris, which, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(type(gpu_engine.impl), "mse_records", one_at_a_time)
        assert np.array_equal(f.sigma_errors(factors), device)
    assert gpu_engine.counters()["readback_state_bytes"] == before
    monkeypatch.setattr(FitState, "places_on_device", property(lambda self: False))
    host = f.sigma_errors(factors)
    assert device.shape == host.shape == (f.batch, 3) and len(set(device[0].tolist())) == 3  # (a slot a replica)
    np.testing.assert_allclose(device, host, rtol=1e-4)
    f.close()


@pytest.mark.gpu
def test_a_placement_and_the_gather_that_takes_its_rows_are_one_submission(gpu_engine):
    # growth places on the device and gathers the rows into the loop of the new count: the
    # placement's passes wait in the rows' encoder and go with the gather's, the same state to
    # the bit as when they were submitted apart
    fits = [_eventful_fitter(gpu_engine, placement="device") for _ in range(2)]
    device = gpu_engine.impl.device
    subs = []
    for i, f in enumerate(fits):
        f.step(60)
        T = f.n_triangles
        with pytest.raises(ValueError, match="a count for each"):  # (a slot without one would take stale rows)
            f.place_on_device([6] * (f.batch + 1), T + 6, f.settings.insert_radius, rows=True)
        placed = f.place_on_device([6] * f.batch, T + 6, f.settings.insert_radius, rows=True)  # (each replica's)
        assert placed.rows.pending is not None
        before = gpu_engine.counters()["submissions"]
        if i == 1:  # apart: the placement first, then the gather with an encoder of its own
            device.queue.submit([placed.rows.encoder(device).finish()])
        f.add(placed)
        subs.append(gpu_engine.counters()["submissions"] - before)
        assert f.n_triangles == T + 6 and placed.rows.pending is None
    assert subs[0] == 1, subs
    for a, b in zip(fits[0]._state(), fits[1]._state()):  # parameters and both moments
        assert np.array_equal(a, b)
    assert np.array_equal(fits[0]._loop.records(), fits[1]._loop.records())
    for f in fits:
        f.close()


@pytest.mark.gpu
def test_a_respawn_on_the_device_is_the_hosts_reordering(gpu_engine):
    fits = [_eventful_fitter(gpu_engine) for _ in range(2)]
    for f in fits:
        f.step(60)
        f.set_locked([1, 4])
    T = fits[0].n_triangles
    dead = [np.array([0, 1, 3, T - 1])]  # 1 is locked: spared, as the host spares it
    new = [P.new_triangles(fits[0].targets[0], 4, None, np.random.default_rng(0), fits[0].settings)]
    new[0][:, 9] = 0.15
    before = [f.respawned for f in fits]
    fits[0].replace(dead, new)
    fits[1].replace_on_device(dead, new)
    host, dev = fits[0]._state(), fits[1]._state()
    for a, b in zip(host, dev):  # parameters and both moments, to the bit
        assert np.array_equal(a, b)
    assert fits[0].locks[0].tolist() == fits[1].locks[0].tolist() == [0, 2]  # 0 and 3 went to the top
    assert [f.respawned - r for f, r in zip(fits, before)] == [3, 3]
    # the records: the host writes them all from the parameters; the device moves the ones it
    # materialised (an ulp apart) and writes the new ones as the host does
    rec = [f._loop.records() for f in fits]
    np.testing.assert_allclose(rec[0], rec[1], rtol=2e-7, atol=1e-7)
    top = slice((T - 3) * 10, T * 10)
    assert np.array_equal(rec[0][:, top], rec[1][:, top])
    for f in fits:
        f.step(5)
    np.testing.assert_allclose(fits[0].history.losses[-5:], fits[1].history.losses[-5:], rtol=1e-4)
    for f in fits:
        f.close()


def test_an_unknown_placement_is_refused(ref_engine):
    from trifit.errors import TrifitError

    with pytest.raises(TrifitError, match="unknown placement 'gpu'; choose one of host, device"):
        Fitter(_target(16, 12), triangles=3, size=16, engine=ref_engine, placement="gpu")
    f = Fitter(_target(16, 12), triangles=3, size=16, engine=ref_engine, placement="device", **EVENTFUL)
    assert not f.places_on_device  # the reference backend places on the host
    f.close()


@pytest.mark.gpu
def test_a_scene_from_before_placement_replays_placed_on_the_host(gpu_engine, tmp_path):
    import json

    from PIL import Image

    from trifit.cli import main

    image = tmp_path / "t.png"
    Image.fromarray((_target() * 255).astype(np.uint8)).save(image)
    made = tmp_path / "a.json"
    assert main(["fit", str(image), "--tris", "24", "--size", "64", "--iters", "80", "--quiet", "--backend", "gpu",
                 "-o", str(made)]) == 0
    data = json.loads(made.read_text())
    assert data["meta"]["settings"]["placement"] == "device"
    out = {}
    for name, placement in (("old", None), ("host", "host"), ("device", "device")):
        if placement is None:
            del data["meta"]["settings"]["placement"]  # as a scene written before the setting
        else:
            data["meta"]["settings"]["placement"] = placement
        src, dst = tmp_path / f"{name}-src.json", tmp_path / f"{name}.json"
        src.write_text(json.dumps(data))
        assert main(["fit", str(image), "--replay", str(src), "--quiet", "--backend", "gpu", "-o", str(dst)]) == 0
        s = Scene.load(dst)
        out[name] = s.triangles.tobytes() + s.background.tobytes()
    assert out["old"] == out["host"] != out["device"]
    made_scene = Scene.load(made)
    assert out["device"] == made_scene.triangles.tobytes() + made_scene.background.tobytes()


def test_a_checkpoint_from_before_placement_resumes_placed_on_the_host(ref_engine):
    f = Fitter(_target(16, 12), triangles=3, size=16, engine=ref_engine, **EVENTFUL)
    f.step(5)
    ck = f.checkpoint()
    for key in ("settings", "initial_settings"):
        del ck.state[key]["placement"]
    g = Fitter.resume(_target(16, 12), ck, engine=ref_engine)
    assert g.settings.placement == "host" and f.settings.placement == "device"


@pytest.mark.gpu
def test_count_changes_reuse_their_gathers_bind_groups_and_skip_uploads_already_there(gpu_engine, monkeypatch):
    """Pruning cycles return to the same counts dozens of times a second: once each loop has
    gathered from the other, a growth and a pruning back make no bind group, and a reset uploads
    no schedule, rates or locks it already holds."""
    f = _eventful_fitter(gpu_engine, placement="device")
    f.step(20)
    T = f.n_triangles
    for _ in range(2):  # each loop gathers from the other once
        f.add(f.strategy._place([3] * f.batch))
        f.keep(f.most_costly(T))
    made, uploads = [], []
    device_cls = type(gpu_engine.impl.device)
    real_bg = device_cls.create_bind_group
    monkeypatch.setattr(device_cls, "create_bind_group", lambda self, **kw: made.append(kw.get("label")) or
                        real_bg(self, **kw))
    queue_cls = next(c for c in type(gpu_engine.impl.device.queue).__mro__ if "write_buffer" in vars(c))
    real_write = vars(queue_cls)["write_buffer"]

    def write(self, buf, *args, **kw):
        uploads.append(buf)
        return real_write(self, buf, *args, **kw)

    monkeypatch.setattr(queue_cls, "write_buffer", write)
    for _ in range(3):
        f.add(f.strategy._place([3] * f.batch))
        f.keep(f.most_costly(T))
    assert made == []
    held = {id(loop.extra[name]) for loop in f._loops.values() for name in ("sched", "opt", "sigma_end", "locked")}
    assert uploads and not held & {id(buf) for buf in uploads}  # (pooled buffers' labels name their first use)
    assert f.n_triangles == T and np.isfinite(f.step(5).loss)
    f.close()


@pytest.mark.gpu
def test_an_upload_of_other_bytes_to_a_host_written_buffer_is_made(gpu_engine):
    f = _eventful_fitter(gpu_engine, placement="device")
    loop = f._loop
    rates = np.arange(8, dtype=np.float32)
    assert loop._write_extra("opt", rates) > 0
    assert loop._write_extra("opt", rates.copy()) == 0
    assert loop._write_extra("opt", rates + 1) > 0
    assert loop._write_extra("params", np.zeros(4, np.float32)) > 0  # (the device writes these: always uploaded)
    assert loop._write_extra("params", np.zeros(4, np.float32)) > 0
    f.close()


@pytest.mark.gpu
def test_a_schedule_or_rates_of_other_values_go_up_however_they_come(gpu_engine):
    # a reset packs the schedule and the rates again only when their values change: the same
    # values in another object upload nothing, a change -- in a new object or the same one --
    # uploads the new packing
    from dataclasses import replace

    from trifit.gpu.layouts import OPTIM, SCHEDULE

    f = _eventful_fitter(gpu_engine, placement="device")
    loop = f._loop
    s = replace(loop.schedule)
    assert loop._write_schedule(s) == 0
    s.lr_final *= 0.5  # changed in place
    assert loop._write_schedule(s) == SCHEDULE.size  # (the final sigmas are as they were)
    assert loop._written["sched"] == SCHEDULE.pack(s.pack())
    s2 = replace(s, sigma_ends=(0.011,) * f.batch)  # (a final sigma a slot: a GPU's default runs two replicas)
    assert loop._write_schedule(s2) == 4 * f.batch and loop._written["sigma_end"] == np.float32([0.011] * f.batch).tobytes()
    settings = replace(loop.settings, lr_colour=loop.settings.lr_colour * 2)
    up = gpu_engine.counters()["upload_bytes"]
    loop.set_optim(settings)
    assert gpu_engine.counters()["upload_bytes"] - up == OPTIM.size
    loop.set_optim(replace(settings))
    assert gpu_engine.counters()["upload_bytes"] - up == OPTIM.size
    f.close()
