"""The fitter's state and the operations a strategy changes it by.

:class:`FitState` (the base of render/fitter.py's Fitter) owns the fit loops -- one per triangle
count and working size, kept for reuse -- and the state they hold: B images' raw parameters and
Adam moments. Each operation keeps parameters and moments consistent (new triangles start with
zero moments) and touches only the images it changes, so an image's fit never depends on the
others in its batch: ``add`` (on top), ``keep`` (per image, in painting order), ``replace``
(re-placed triangles move to the top), ``use_schedule``, ``to_full_size``, ``use_targets`` (a
video's next frame: new targets, the same triangles and moments).
"""

from __future__ import annotations

from dataclasses import dataclass, replace as dc_replace
from typing import NamedTuple

import numpy as np

from .errors import AdapterError, DeviceLostError, TrifitError
from .fitloop import FRESH_ROW, LR_VERTEX_SIZE, FitSettings, logit, raw_triangles, sigmoid, values_from_raw
from .history import release_loop
from .imageio import as_target
from .replicas import winners

#: fit loops kept by (triangle count, working size): pruning cycles revisit a few counts, and a
#: new loop's buffers and bind groups cost milliseconds; a count set by hand keeps none but its own
MAX_CACHED_LOOPS = 8
_LR_NAMES = ("lr_vertex", "lr_colour", "lr_alpha", "lr_background")


class HostSnapshot(NamedTuple):
    """What a lost device resumes from (the fitter takes one every ``host_snapshot_every``
    iterations): the state at ``iteration`` with ``count`` triangles, and whether the event at
    that iteration is still to run (a snapshot due where an event follows its chunk holds the
    state before the event, which the chunk brought back). With ``records`` (the scene records
    as the device materialised them, brought back with the state) and ``host`` (the fit's
    host-side state then: :meth:`FitState.host_state`) and ``changes`` (how many live changes the
    fitter had recorded: a recovery keeps any made since), the fit resumed from it goes on to the
    bit as if the device had never been lost (Fitter._recover_device)."""

    raw: np.ndarray
    m: np.ndarray
    v: np.ndarray
    iteration: int
    count: int
    coarse: bool
    event_pending: bool
    ids: tuple  # FitState.ids_state() then
    records: np.ndarray | None = None
    host: dict | None = None
    changes: int = 0


@dataclass(frozen=True)
class PlacedOnDevice:
    """New triangles placed on the device, ``counts[b]`` for image b, as the rows a gather takes
    (render/gpu/events.py ``DeviceRows``, grouped by image in order): never read back."""

    rows: object
    counts: tuple[int, ...]

    def first(self, b: int) -> int:
        """Image b's first row."""
        return sum(self.counts[:b])


def fresh_rows(raw: np.ndarray) -> np.ndarray:
    """(rows, FRESH_ROW) float32 for new triangles gathered on the device (GpuFitLoop.permute /
    take): their raw parameters (rows, 10) in float32, then the record values set_state would
    write for them (the host's sigmoid of those float32 parameters)."""
    raw = np.asarray(raw).astype(np.float32)
    values = raw.astype(np.float64)
    values[:, 6:10] = sigmoid(values[:, 6:10])
    rows = np.concatenate([raw, values.astype(np.float32)], axis=1)
    assert rows.shape[1] == FRESH_ROW
    return rows


def in_halves(call, n: int) -> np.ndarray:
    """``call(slice(0, n))`` -- n scenes in one device call -- or, where one device buffer cannot
    hold them (an AdapterError that is not a lost device), the two halves' calls, and so on down;
    the results joined in order. Each scene's result does not depend on the others in its call."""
    def run(lo: int, hi: int) -> np.ndarray:
        try:
            return np.asarray(call(slice(lo, hi)))
        except AdapterError as exc:
            if isinstance(exc, DeviceLostError) or hi - lo < 2:
                raise
            mid = (lo + hi) // 2
            return np.concatenate([run(lo, mid), run(mid, hi)])

    return run(0, n)


#: where recolour clips a mapped colour: a colour the map pushes past 0 or 1 is held an 8-bit step
#: inside (it shows the same), not at the logit's clamp, far out on the sigmoid's flat tail
RECOLOUR_RANGE = (1 / 255, 1 - 1 / 255)


class FitState:
    """State and operations; the subclass sets engine, settings, strategy, targets, batch, width,
    height, rngs, coarse, full_from, schedule, n_triangles, _half, _loops, _loop, _cached,
    _lr_scale, _lr_fault, _host_snapshot, _next_event, respawned, faults, changes and changes_made.
    ``batch`` counts slots: each of ``images`` images is ``replicas`` slots, image-major
    (render/replicas.py); what the operations do, they do per slot."""

    images = replicas = 1  # (the subclass sets both)

    # each image's triangle ids and the next id to give (triangle_ids_all; None: numbered at first use)
    tri_ids: list[np.ndarray] | None = None
    _next_id = 0

    def working_targets(self) -> np.ndarray:
        return self._half if self.coarse else self.targets

    def values(self):
        """(triangles (B, T, 10), backgrounds (B, 3), sigmas (B,)) now, from the parameters'
        sigmoids on the host (one readback, shared with the chunk's when it brought the state)."""
        raw = self._state()[0]
        vals = [values_from_raw(r, self.n_triangles) for r in raw]
        tris = self.with_locked_values(np.stack([t for t, _ in vals]))
        return tris, np.stack([b for _, b in vals]), np.array(self._loop.sigmas, float)

    def placement_image(self) -> np.ndarray:
        """(B, H, W, 3) at full size, what new triangles are placed against: the last forward's
        image (no render of its own) at full size, else a render of the current values."""
        if not self.coarse:
            image = self._loop.read_image()
            if image is not None:
                return image.reshape(self.targets.shape)
        tris, bg, sigmas = self.values()
        return self.render(tris, bg, sigmas, full=True, transient=True)

    @property
    def places_on_device(self) -> bool:
        """Growth and respawn place on the device (``placement = "device"`` on the GPU backend)."""
        return self.settings.placement == "device" and hasattr(self.engine.impl, "placement")

    def place_on_device(self, counts: list[int], n_after: int | None, radius_scale: float,
                        rows: bool = False) -> list | PlacedOnDevice:
        """counts[b] new triangles for image b (values (k, 10); None for none) placed on the
        device against the current render at full size: the tiles' error sums come back, the
        host samples them with image b's random stream (render/placement.py), the device finds
        the pixels and shapes the triangles; no image leaves the device. ``rows``: the triangles
        stay there too, as the rows :meth:`add` and :meth:`replace_on_device` gather
        (:class:`PlacedOnDevice`): no round trip at all."""
        from . import placement

        if len(counts) != self.batch:  # (one count per slot: each image's replicas place their own)
            raise ValueError(f"place_on_device takes a count for each of the fit's {self.batch} slots, got {len(counts)}")
        dp = self.device_placement()
        got = self._loop.tile_sums(dp)  # (they came back with the chunk, with the image they are of)
        if got is not None:
            sums, image = got
        else:
            image = None if self.coarse else self._loop.image_buffer()
            if image is None:  # the half-size stage's forward, or none since a new state: render the records
                image = self._loop.render_on_device(self.width, self.height)
            sums = dp.error_tiles(image)
        records = [placement.device_records(b, k, sums[b], self.height, self.width, self.rngs[b], self.settings,
                                            radius_scale, n_after) for b, k in enumerate(counts)]
        if rows:
            return PlacedOnDevice(dp.place_rows(image, np.concatenate(records), self.settings.insert_alpha,
                                                submit=False),  # (submitted with the gather that takes them)
                                  tuple(int(k) for k in counts))
        placed = dp.place(image, np.concatenate(records))
        out, at = [], 0
        for k in counts:
            out.append(placement.device_triangles(placed[at:at + k], self.settings.insert_alpha, self.short_side)
                       if k else None)
            at += k
        return out

    def device_placement(self):
        """The fit's placement on the device (render/gpu/events.py), made at its first use."""
        if self._device_placement is None:
            self._device_placement = self.engine.impl.placement(self.targets, self.focus)
        return self._device_placement

    def stopped_on_device(self, alpha_min: float) -> list[np.ndarray]:
        """Each image's triangles (indices) that stopped contributing -- opacity under
        ``alpha_min``, or under 1 px^2 of opacity-weighted area on the full-size frame -- from
        the records on the device (the strategy's rule, render/strategy.py stopped_contributing)."""
        flags = self._loop.stopped_contributing(alpha_min, self.width, self.height)
        return [np.flatnonzero(f) for f in flags]

    def replace_on_device(self, dead: list[np.ndarray], new: list[np.ndarray | None] | PlacedOnDevice) -> None:
        """:meth:`replace` done on the device: the same order (the living in order, then the new
        ones on top, moments zeroed; locked triangles spared), the state never read back -- the
        new triangles' raw parameters and the records they materialise to go up, or are there
        already (``new`` placed on the device: :class:`PlacedOnDevice`)."""
        placed = new if isinstance(new, PlacedOnDevice) else None
        if placed is not None:  # each dead triangle's row on the device (a locked one's stays unused there)
            new = [placed.first(b) + np.arange(len(d)) for b, d in enumerate(dead)]
        dead, new = self._spare_locked(dead, new)
        B, T = self.batch, self.n_triangles
        source = np.tile(np.arange(T, dtype=np.int64), (B, 1))
        rows, images = [], []
        ids = self.triangle_ids_all()
        for b, (d, fresh) in enumerate(zip(dead, new)):
            if not len(d):
                continue
            alive = np.ones(T, bool)
            alive[d] = False
            order = np.concatenate([np.flatnonzero(alive), d])
            self._reindex_locks(b, order)
            ids[b] = np.concatenate([ids[b][alive], self._new_ids(len(d))])  # re-placed: new triangles
            if placed is not None:
                fresh_at = fresh
            else:
                fresh_at = sum(len(r) for r in rows) + np.arange(len(d))
                rows.append(fresh_rows(raw_triangles(fresh)))
            order[T - len(d):] = -1 - fresh_at
            source[b] = order
            images.append(b)
            self.respawned += len(d)
        if not images:
            return
        self.tri_ids = ids
        self._lock_loop(self._loop)
        self._loop.permute(source, placed.rows if placed is not None else np.concatenate(rows))
        self._cached = None

    def drop_device_placement(self) -> None:
        """Give the device placement's buffers back (new targets or focus maps, a closed fit)."""
        if self._device_placement is not None:
            self._device_placement.release()
            self._device_placement = None

    def render(self, tris, bg, sigmas, *, full: bool = False, transient: bool = False) -> np.ndarray:
        """Render B scenes at the working (or full) size: float32 (B, H, W, 3) in [0, 1]. A batch
        larger than one device buffer allows (a sigma probe renders 3 scenes an image) goes in
        halves: each scene renders alone the same as in any batch."""
        H, W = (self.targets if full else self.working_targets()).shape[1:3]
        bg = np.clip(bg, 0, 1)
        out = in_halves(lambda s: self.engine.impl.render_batch(tris[s], bg[s], sigmas[s], W, H, transient=transient),
                        len(tris))
        return np.clip(out, 0.0, 1.0).astype(np.float32)

    def scene_errors(self, tris, bg, sigmas, per_image: int) -> np.ndarray:
        """(B, K) mean squared error of each image's K scenes (``tris`` (B * K, T, 10), image b's
        at b * K ..) against its working target, focus-weighted as its loss is: summed on the
        device, so only the numbers come back (halves of the batch where one device buffer is too
        small, as :meth:`render`)."""
        K = per_image
        targets = np.repeat(self.working_targets(), K, axis=0)
        focus = self.working_focus()
        weights = None if focus is None else np.repeat(focus, K, axis=0)
        bg = np.clip(bg, 0, 1)
        return in_halves(lambda s: self.engine.impl.mse_batch(tris[s], bg[s], sigmas[s], targets[s], transient=True,
                                                              weights=None if weights is None else weights[s]),
                         len(tris)).reshape(self.batch, K)

    def sigma_errors(self, factors) -> np.ndarray:
        """(B, K): each image's error (as :meth:`scene_errors`) at its current sigma times each of
        the K ``factors`` -- what the sigma probes compare. From the loop's scene records on the
        device where the fit places there (no state comes back), else from the state's values."""
        factors = np.asarray(factors, dtype=np.float64)
        K, sigmas = len(factors), np.asarray(self._loop.sigmas, float)
        probes = (sigmas[:, None] * factors[None]).ravel()
        if not self.places_on_device:
            tris, bg, _ = self.values()
            return self.scene_errors(np.repeat(tris, K, axis=0), np.repeat(bg, K, axis=0), probes, K)
        targets, focus = self.working_targets(), self.working_focus()

        def errors(s: slice) -> np.ndarray:  # scene i: record i // K at probes[i]
            which = np.arange(self.batch * K)[s] // K
            return self.engine.impl.mse_records(self._loop.records_buffer(), self.n_triangles, which, probes[s],
                                                targets[which], transient=True,
                                                weights=None if focus is None else focus[which])

        return in_halves(errors, self.batch * K).reshape(self.batch, K)

    def most_costly(self, n: int, transient: bool = False, weights: np.ndarray | None = None) -> np.ndarray:
        """(B, n) indices, in painting order, of each image's n triangles whose removal would
        cost most against the full-size target (a forward and backward on the GPU). ``weights``
        (B, T) > 0, where given: each triangle ranks by its cost times its weight, or divided by
        it where the cost is negative (its removal would help), so a weight above 1 moves a
        triangle towards being kept whatever the cost's sign (the strategy's policy)."""
        costs = self.pruning_costs(transient)
        if weights is not None:
            w = np.asarray(weights, dtype=np.float64)
            costs = costs.astype(np.float64)
            costs = np.where(costs > 0, costs * w, costs / w)
        return np.sort(np.argsort(-costs, kind="stable", axis=1)[:, :n], axis=1)

    def removal_costs(self, transient: bool = False, weights: np.ndarray | None = None) -> np.ndarray:
        """(B, T) how much each triangle's removal alone would grow the squared error against the
        full-size target (each pixel's term times ``weights`` (B, H, W), where given) -- from the
        scene records on the device where the fit places there (no state comes back)."""
        # (the targets as they are: float32, what the pass uploads -- no copies of the full-size images)
        if self.places_on_device:
            got = self._loop.removal_costs(self.targets, weights)  # (they came back with the chunk)
            if got is not None:
                return got
            return np.asarray(self.engine.impl.removal_costs_records(
                self._loop.records_buffer(), self.n_triangles, np.asarray(self._loop.sigmas, float),
                self.targets, transient=transient, weights=weights))
        tris, bg, sigmas = self.values()
        return np.asarray(self.engine.impl.removal_costs_batch(tris, np.clip(bg, 0, 1), sigmas, self.targets,
                                                               transient=transient, weights=weights))

    # ------------------------------------------------------------------ operations
    def add(self, new: list[np.ndarray] | PlacedOnDevice) -> None:
        """Put each image's new triangles (values, (k, 10), or as many placed on the device) on top,
        with zero moments (gathered on the device where the fit places there: no state comes back)."""
        placed = new if isinstance(new, PlacedOnDevice) else None
        if placed is not None and len(set(placed.counts)) != 1:
            raise ValueError(f"add takes as many new triangles for every image, got {placed.counts}")
        fresh = None if placed is not None else raw_triangles(np.stack(new))
        T, k = self.n_triangles, placed.counts[0] if placed is not None else fresh.shape[1]
        self.tri_ids = [np.concatenate([ids, self._new_ids(k)]) for ids in self.triangle_ids_all()]
        if self.places_on_device:
            source = np.concatenate([np.tile(np.arange(T), (self.batch, 1)),
                                     -1 - np.arange(self.batch * k).reshape(self.batch, k)], axis=1)
            self._take_on_device(source, placed.rows if placed is not None else fresh_rows(fresh.reshape(-1, 10)),
                                 T + k)
            return
        self._join([(np.concatenate([tri, fresh if j == 0 else np.zeros_like(fresh)], axis=1), rest)
                    for j, (tri, rest) in enumerate(self._split())], T + k)

    def keep(self, idx: np.ndarray) -> None:
        """Keep triangles ``idx[b]`` of each image b (all the same length), in that order."""
        idx = np.asarray(idx)
        ids = self.triangle_ids_all()
        for b, order in enumerate(idx):
            self._reindex_locks(b, order)
        self.tri_ids = [i[order] for i, order in zip(ids, idx)]
        if self.places_on_device:
            self._take_on_device(idx, np.zeros((0, 20), np.float32), idx.shape[1])
            return
        self._join([(np.take_along_axis(tri, idx[:, :, None], axis=1), rest) for tri, rest in self._split()],
                   idx.shape[1])

    def replace(self, dead: list[np.ndarray], new: list[np.ndarray | None]) -> None:
        """Move each image's ``dead`` triangles to the top as ``new`` (values), moments zeroed
        (a locked triangle among ``dead`` stays where it is, and its row of ``new`` is dropped)."""
        dead, new = self._spare_locked(dead, new)
        parts = self._split()
        out = [(tri.copy(), rest) for tri, rest in parts]
        ids = self.triangle_ids_all()
        for b, (d, fresh) in enumerate(zip(dead, new)):
            if not len(d):
                continue
            alive = np.ones(self.n_triangles, bool)
            alive[d] = False
            order = np.concatenate([np.flatnonzero(alive), d])
            self._reindex_locks(b, order)
            ids[b] = np.concatenate([ids[b][alive], self._new_ids(len(d))])  # re-placed: new triangles
            raw_new = raw_triangles(fresh)
            for j, (tri, _) in enumerate(out):
                tri[b] = tri[b][order]
                tri[b, len(order) - len(d):] = raw_new if j == 0 else 0.0
            self.respawned += len(d)
        self.tri_ids = ids
        self._join(out, self.n_triangles, images=[b for b, d in enumerate(dead) if len(d)])

    def recolour(self, gain: np.ndarray, offset: np.ndarray) -> None:
        """Map each image's colours -- every triangle's but the locked ones', and the background's --
        by ``gain x colour + offset`` per channel (both (B, 3)), clipped to RECOLOUR_RANGE; moments
        kept. Where no colour leaves that range the render maps alike: it is a blend of those
        colours whose weights sum to 1."""
        gain, offset = np.asarray(gain, np.float64), np.asarray(offset, np.float64)
        parts = self._split()
        (tri, rest), moments = parts[0], parts[1:]
        tri, rest = tri.copy(), rest.copy()
        for b in range(self.batch):
            spare = np.ones(self.n_triangles, bool)
            spare[np.asarray(self.locks[b], np.int64)] = False
            tri[b, spare, 6:9] = logit(np.clip(gain[b] * sigmoid(tri[b, spare, 6:9]) + offset[b], *RECOLOUR_RANGE))
            rest[b, :3] = logit(np.clip(gain[b] * sigmoid(rest[b, :3]) + offset[b], *RECOLOUR_RANGE))
        self._join([(tri, rest), *moments], self.n_triangles)

    def select_replicas(self) -> np.ndarray | None:
        """Every replica of each image takes the state of the image's replica with the lowest
        latest loss (render/replicas.py): parameters, Adam moments and scene records (copied on
        the device where the loop can), triangle ids, locks, loss history, and the strategy's
        per-replica state (``Strategy.took_replicas``). Each keeps its own random stream.
        Returns the source of each slot, or None where nothing moved (one replica, or the
        lowest already everywhere)."""
        if self.replicas == 1:
            return None
        source = winners(self.slot_losses(), self.replicas)
        if np.all(source == np.arange(self.batch)):
            return None
        if hasattr(self._loop, "copy_images"):
            self._loop.copy_images(source)
            self._cached = None
        else:
            raw, m, v = self._state()
            self._set(raw[source], m[source], v[source], self.n_triangles, self.iteration)
        ids = self.triangle_ids_all()
        self.tri_ids = [ids[s].copy() for s in source]
        self.locks = [self.locks[s].copy() for s in source]
        self._lock_values = [self._lock_values[s].copy() for s in source]
        if self._locked_raw:
            self._locked_raw = [self._locked_raw[s].copy() for s in source]
        if any(len(i) for i in self.locks):  # (the loop's flags follow; with none, what the chunk
            self._lock_loop(self._loop)     # brought back for the event stays, as copy_images left it)
        self.histories = [h if s == b else self.histories[s].copy() for b, (s, h) in
                          enumerate(zip(source, self.histories))]
        self.strategy.took_replicas(source)
        self.use_schedule(self.strategy.schedule(self.iteration))
        return source

    def use_schedule(self, schedule) -> None:
        self.schedule = schedule
        self._loop.set_schedule(schedule)

    def to_full_size(self) -> None:
        """End the half-size stage: the fit goes on at the working size (the state gathered on the
        device where the fit places there)."""
        if self.places_on_device:
            self.coarse = False
            self.full_from = self.iteration
            T = self.n_triangles
            self._take_on_device(np.tile(np.arange(T), (self.batch, 1)), np.zeros((0, 20), np.float32), T)
            return
        raw, m, v = self._state()
        self.coarse = False
        self.full_from = self.iteration
        self._set(raw, m, v, self.n_triangles, self.iteration)

    def use_targets(self, images) -> None:
        """Fit new target images (one per image of the fit, resized to the working size, which
        must not change) from here on, as a video's next frame: parameters, Adam moments, the
        iteration and the schedule are kept, so the triangles move from where they are. A
        half-size stage ends; the fit loops hold their targets, so every kept loop is released
        and the current state goes on in a new one."""
        targets = np.repeat(np.stack([as_target(t, self.settings.size) for t in images]), self.replicas, axis=0)
        if targets.shape != self.targets.shape:
            raise TrifitError(f"new targets of shape {targets.shape[1:]} (x{len(images)}) for a fit of "
                              f"{self.targets.shape[1:]} (x{self.images}): a fit's images keep their working size")
        raw, m, v = self._state()
        for loop in self._loops.values():
            release_loop(loop)
        self._loops.clear()
        if self.coarse:
            self.coarse, self.full_from = False, self.iteration
        targets.flags.writeable = False  # (as the fitter's first targets)
        self.targets, self._half = targets, None
        self.drop_device_placement()
        self._set(raw, m, v, self.n_triangles, self.iteration)
        self._snapshot_on_host(raw, m, v, coarse=False)  # a lost device resumes here
        self._next_event = self.strategy.next_event(self.iteration)

    # ------------------------------------------------------------------ mechanics
    def _snapshot_on_host(self, raw, m, v, coarse: bool, event_pending: bool = False, records=None) -> None:
        """Keep the state ``raw, m, v`` at this iteration, with the count, the triangle ids and the
        host-side state now, as what a lost device resumes from; ``records``: the device's scene
        records of that state (None: the host's, as where the host has just set the state)."""
        self._host_snapshot = HostSnapshot(raw, m, v, self.iteration, self.n_triangles, coarse, event_pending,
                                           self.ids_state(), records, self.host_state(), self.changes_made)

    def host_state(self) -> dict:
        """What the fit's iterations and events change on the host, beside the parameters and the
        triangles' ids: the schedule, the strategy's progress, the random streams and the counters.
        Its one owner: a device-loss snapshot keeps it as it is, a checkpoint
        (render/checkpoint.py) writes it as JSON."""
        return {"schedule": self.schedule, "strategy": self.strategy.state(), "full_from": self.full_from,
                "rngs": [rng.bit_generator.state for rng in self.rngs], "respawned": self.respawned,
                "faults": self.faults, "lr_fault": self._lr_fault}

    def restore_host_state(self, host: dict) -> None:
        """Put back what :meth:`host_state` gave (before the loop is made: it takes the schedule).
        The strategy's state goes first: it is what a damaged checkpoint most likely fails on."""
        self.strategy.load_state(host["strategy"])
        self.schedule = host["schedule"]
        self.full_from = host["full_from"]
        for rng, state in zip(self.rngs, host["rngs"]):
            rng.bit_generator.state = state
        self.respawned, self.faults, self._lr_fault = host["respawned"], host["faults"], host["lr_fault"]

    def _state(self, kind: str = "state"):
        c = self._cached
        if c is not None and c[0] is self._loop and c[1] == self._loop.iter:
            return tuple(a.copy() for a in c[2:])
        raw, m, v = (np.asarray(a, dtype=np.float64).reshape(self.batch, -1) for a in self._loop.get_state(kind))
        self._cached = (self._loop, self._loop.iter, raw, m, v)
        return raw.copy(), m.copy(), v.copy()

    def _split(self):
        T, B = self.n_triangles, self.batch
        return [(a[:, : T * 10].reshape(B, T, 10), a[:, T * 10:]) for a in self._state()]

    def _join(self, parts, n: int, images=None) -> None:
        self._anchor = None  # (its rows were the triangles before the operation)
        raw, m, v = (np.concatenate([tri.reshape(self.batch, -1), rest], axis=1) for tri, rest in parts)
        self._set(raw, m, v, n, self.iteration, images)

    def _take_on_device(self, source: np.ndarray, fresh: np.ndarray, n: int) -> None:
        """Continue with n triangles at the current working size, gathered on the device from the
        current loop: triangle t of image b is the current loop's ``source[b, t]``, or fresh row
        ``-1 - source[b, t]`` (rows, 20: raw parameters and the record values they materialise to),
        with zero moments; the background comes along (GpuFitLoop.take). Nothing is read back.
        The loop of that count and size is reset without a state, or made."""
        old = self._loop
        self._anchor = None  # (its rows were the triangles before the operation)
        self.n_triangles = n
        target = self.working_targets()
        key = (n, target.shape)
        if self._loops.get(key) is old:  # the same count and size: a reordering in place
            self._lock_loop(old)
            old.permute(source, fresh)
            self._cached = None
            return
        loop = self._prepared_loop(key, self.iteration)
        loop.take(old, source, fresh)  # (before any loop is released: the old one may be)
        self._make_current(key, loop)
        self._cached = None

    def _set(self, raw, m, v, n: int, iteration: int, images=None, exact: bool = False) -> None:
        """Continue from this state with n triangles: a kept loop of that count and working size
        reset (pruning cycles return to a few counts dozens of times a second), or a new one.
        ``images``: the same count and size, and only these images changed (a respawn): the
        loop takes their new state and leaves the others' bits alone, so an image's fit never
        depends on what happens to the others in its batch. The state is rounded to float32 (what
        the GPU loop holds), unless ``exact`` (a checkpoint of the float64 reference loop)."""
        kind = np.float64 if exact else np.float32
        raw = np.asarray(raw, dtype=kind).astype(np.float64)
        m = np.zeros_like(raw) if m is None else np.asarray(m, dtype=kind).astype(np.float64)
        v = np.zeros_like(raw) if v is None else np.asarray(v, dtype=kind).astype(np.float64)
        self.n_triangles = n
        target = self.working_targets()
        key = (n, target.shape)
        if images is not None and self._loops.get(key) is self._loop:
            self._lock_loop(self._loop)
            self._loop.set_state(raw, m, v, images=images)
            self._cached = (self._loop, iteration, raw, m, v)
            return
        loop = self._prepared_loop(key, iteration, raw, m, v)
        self._make_current(key, loop)
        self._cached = (loop, iteration, raw, m, v)

    def _prepared_loop(self, key, iteration: int, raw=None, m=None, v=None):
        """The loop for ``key`` (count, working target shape) -- the kept one reset, or a new one --
        told the locks, in the state (raw, m, v), or without one where ``raw`` is None (a gather on
        the device fills it: GpuFitLoop.take). Not yet the current loop; nothing released."""
        loop = self._loops.pop(key, None)
        if loop is None:
            loop = self._new_loop(key[0], not self.coarse, iteration, raw)
            self._lock_loop(loop)
            if raw is not None:
                loop.set_state(raw, m, v)
        else:
            self._lock_loop(loop)
            loop.reset(raw, m, v, iteration, self.schedule, self._optim())
        return loop

    def _new_loop(self, n: int, full: bool, iteration: int, raw=None):
        """A new fit loop of n triangles at the working size (``full``) or at half of it, in the
        state ``raw`` or without one: made alike at an event and ahead of one (:meth:`_make_next_loop`)."""
        target = self.targets if full else self._half
        focus = None if self.focus is None else self.focus if full else self._focus_half
        return self.engine.impl.fit_loop(target, raw, n, self._optim(), self.schedule, iteration,
                                         weights=focus, ahead=self._shapes_ahead())

    def _shapes_ahead(self) -> list[tuple[int, int, int, int, bool]]:
        """(batch, height, width, triangles, fit) of every shape the fit may still use: a loop for
        each count the strategy's plan can take, at the working size and at half size while that
        stage lasts, and the passes its events make at the working size (removal costs and
        renders for placement: the fit's batch; the sigma probes: a scene per probe factor) --
        so that their pipelines are built with the first loop's, not inside the fit's steps."""
        B, (H, W) = self.batch, self.targets.shape[1:3]
        sizes = [(H, W)] + ([self._half.shape[1:3]] if self.coarse and self._half is not None else [])
        out = []
        probes = self.strategy.probe_scenes()
        for n in sorted(self.strategy.counts_ahead()):
            out += [(B, h, w, n, True) for h, w in sizes] + [(B, H, W, n, False)]
            out += [(B * probes, H, W, n, False)] if probes else []
        return out

    def _encode_kept_ahead(self) -> None:
        """While the current loop's chunk runs: the next first part of the kept loop of this
        working size used most recently without one (GpuFitLoop.encode_ahead), so that a count
        change back to it starts with only a submission. One a call: each costs the host about
        what encoding eight iterations does."""
        shape = self.working_targets().shape
        for (_, size), loop in reversed(self._loops.items()):
            if loop is not self._loop and size == shape and loop.encode_ahead():
                return

    def _make_next_loop(self) -> bool:
        """While the chunk before the next event runs (GpuFitLoop.run's ``prepare``): the GPU
        loop of the count and working size that event moves the fit to, as the plan stands, made
        now where no loop of that key is kept. Its buffers, bind groups and dispatch list are
        several milliseconds of the host's that, made inside the event, the GPU would wait
        through (a fit makes one for each count and size it reaches). It is kept beside the
        current loop, and the event resets it as it resets any kept loop (:meth:`_prepared_loop`),
        so the fit is the same to the bit; a plan changed before the event leaves it to the
        loops' cache. Returns whether it made one."""
        if MAX_CACHED_LOOPS < 2 or not hasattr(self.engine.impl, "placement"):  # (no room beside the current
            return False  # loop; the reference backend's loops cost nothing to make)
        at = self._next_event
        count = self.strategy.count_after(at)
        full = not self.coarse or self.strategy.leaves_half_size(at)
        target = self.targets if full else self._half
        key = (self.n_triangles if count is None else count, target.shape)
        if key in self._loops:
            return False
        self._loops[key] = self._new_loop(key[0], full, self.iteration)
        self._evict_loops()
        return True

    def _make_current(self, key, loop) -> None:
        self._loops[key] = loop
        if loop is not self._loop:
            self._loop_rendered = False  # (its image buffer is not this state's render: Fitter.gpu_image)
        self._loop = loop
        self._evict_loops()

    def _evict_loops(self) -> None:
        """Release the least recently used loops past MAX_CACHED_LOOPS, never the current one
        nor the newest (a loop made for the next event)."""
        while len(self._loops) > MAX_CACHED_LOOPS:
            keys = list(self._loops)
            oldest = next((k for k in keys[:-1] if self._loops[k] is not self._loop), None)
            if oldest is None:
                return
            release_loop(self._loops.pop(oldest))

    def _optim(self) -> FitSettings:
        """The settings with the learning rates in force: as set x the live scale x fault halvings,
        the vertices' in pixels (fitloop.LR_VERTEX_SIZE): a step moves a vertex as many pixels at
        any working size, where the same step in frame units would be 3x as many at 512 px as at 176.
        The size under which a triangle steps slower (``small_triangle_px``, in pixels of the working
        size, as the vertex rate is) in pixels of the frame the loop fits: half of it at half size."""
        f = self._lr_scale * self._lr_fault
        rates = {k: getattr(self.settings, k) * f for k in _LR_NAMES}
        rates["lr_vertex"] *= LR_VERTEX_SIZE / max(self.width, self.height)
        frame = self.working_targets().shape[-3:-1]
        rates["small_triangle_px"] = self.settings.small_triangle_px * max(frame) / max(self.width, self.height)
        return dc_replace(self.settings, **rates)

    def learning_rates(self) -> dict[str, float]:
        opt = self._optim()
        return {k: getattr(opt, k) for k in _LR_NAMES}

    def _loop_values(self):
        tris, bg, sigma = self._loop.current_values()
        return (np.asarray(tris).reshape(self.batch, self.n_triangles, 10), np.asarray(bg).reshape(self.batch, 3),
                np.asarray(sigma, dtype=np.float64).reshape(-1) * np.ones(self.batch))

    def _values_as_set(self):
        """(triangles (B, T, 10), backgrounds (B, 3)) as the loop would report them had the current
        state just been set by :meth:`_set` (rounded as it rounds): what an operation that keeps
        triangles -- a prune when the run ends -- leaves of their values. A step's own scene
        records (the device's sigmoid) are an ulp from the host's that a set state writes."""
        raw = np.asarray(self._state()[0], dtype=np.float32).astype(np.float64)
        tris, bg = self._loop.values_as_set(raw)
        return (np.asarray(tris).reshape(self.batch, self.n_triangles, 10), np.asarray(bg).reshape(self.batch, 3))

    # ------------------------------------------------------------------ triangle ids (edits)
    def triangle_ids_all(self) -> list[np.ndarray]:
        """Each image's triangles' ids, in painting order: a triangle keeps its id while growth,
        pruning and respawn renumber it (a re-placed triangle is a new one, with a new id), so
        a selection made a few chunks ago still names the triangles it named (render/edits.py),
        and ids increase with the order triangles were placed in (the strategy's newcomers,
        :meth:`placed_since`). A checkpoint and a host snapshot keep them."""
        ids = self.tri_ids
        if ids is None or len(ids) != self.batch or any(len(i) != self.n_triangles for i in ids):
            self._next_id = 0
            ids = [self._new_ids(self.n_triangles) for _ in range(self.batch)]
            self.tri_ids = ids
        return [i.copy() for i in ids]

    def next_triangle_id(self) -> int:
        """The id the next triangle placed will have (a mark for :meth:`placed_since`)."""
        self.triangle_ids_all()  # (numbered, so the counter is where new ids start)
        return int(self._next_id)

    def placed_since(self, mark: int) -> np.ndarray:
        """(B, T) whether each triangle was placed (grown, re-placed, inserted) after
        :meth:`next_triangle_id` returned ``mark``."""
        return np.stack(self.triangle_ids_all()) >= mark

    def ids_state(self) -> tuple[list[np.ndarray], int]:
        """(each image's ids, the next id): what a checkpoint or a host snapshot keeps."""
        return self.triangle_ids_all(), int(self._next_id)

    def set_ids_state(self, ids: list, next_id: int) -> None:
        """Put back :meth:`ids_state` (ValueError where they do not fit the triangles)."""
        ids = [np.asarray(i, dtype=np.int64).reshape(-1) for i in ids]
        if len(ids) != self.batch or any(len(i) != self.n_triangles or len(np.unique(i)) != len(i) for i in ids) \
                or any(len(i) and (i.min() < 0 or i.max() >= next_id) for i in ids):
            raise ValueError("triangle ids that do not fit the triangles")
        self.tri_ids, self._next_id = ids, int(next_id)

    def _new_ids(self, k: int) -> np.ndarray:
        first = self._next_id
        self._next_id = first + int(k)
        return np.arange(first, first + int(k), dtype=np.int64)

    # ------------------------------------------------------------------ locks and focus (issue 20)
    def working_focus(self) -> np.ndarray | None:
        """The focus maps (B, H, W) at the working size (half size in the coarse stage), or None
        (the subclass sets ``focus`` and ``_focus_half``)."""
        if self.focus is None:
            return None
        return self._focus_half if self.coarse else self.focus

    def lock(self, locked: list, values: list) -> None:
        """Lock triangles ``locked[b]`` (sorted indices, painting order) of each image b at
        ``values[b]`` (k, 10): from the next iteration the fit loop leaves them to the bit, and
        every operation keeps them and their order (lists of empty arrays: nothing locked)."""
        self.locks = [np.asarray(i, dtype=np.int64).reshape(-1) for i in locked]
        self._lock_values = [np.asarray(v, dtype=np.float64).reshape(-1, 10) for v in values]
        if self._loop is not None:  # (else the first loop learns them as it is made)
            self._loop.set_locked(self.locks, self._lock_values, records=True)

    def with_locked_values(self, tris: np.ndarray) -> np.ndarray:
        """``tris`` (B, T, 10) with the locked triangles at their locked values (as given: float64,
        where the device holds float32), in place."""
        for b, (idx, vals) in enumerate(zip(self.locks, self._lock_values)):
            tris[b, idx] = vals
        return tris

    def pruning_costs(self, transient: bool = False) -> np.ndarray:
        """(B, T) what pruning ranks by: :meth:`removal_costs`, weighted by the focus map where
        there is one, and infinite for a locked triangle (pruning keeps it)."""
        costs = self.removal_costs(transient, self.focus)
        for b, idx in enumerate(self.locks):
            costs[b, idx] = np.inf
        return costs

    def _lock_loop(self, loop) -> None:
        """Tell ``loop`` the locks before it takes a state (which puts the locked values in place),
        and the anchor."""
        loop.set_locked(self.locks, self._lock_values, records=False)
        if self._anchor is not None and self._anchor[0].shape[1] != loop.n_tris:
            self._anchor = None  # (a lost device's snapshot of another count)
        loop.set_anchor(*(self._anchor or (None,)))

    # ------------------------------------------------------------------ an anchor (a video's --steady)
    _anchor = None  # (anchor values (B, T, 10), weights (B, T, 10)) or None

    def set_anchor(self, anchor, weights=None) -> None:
        """Pull each image's triangles towards ``anchor`` (B, T, 10) values with ``weights``
        (B, T, 10) >= 0: each iteration adds the gradient of ``sum(weights (value - anchor)^2)`` to
        the loss's, on the device (reference.anchor_penalty). It holds until the triangles change
        (an operation that adds, keeps or replaces triangles ends it) or ``set_anchor(None)``; a
        checkpoint does not keep it (a clip's are taken between frames, and each frame sets its own)."""
        shape = (self.batch, self.n_triangles, 10)
        self._anchor = None if anchor is None else (np.asarray(anchor, dtype=np.float64).reshape(shape),
                                                    np.asarray(weights, dtype=np.float64).reshape(shape))
        self._loop.set_anchor(*(self._anchor or (None,)))

    def _reindex_locks(self, b: int, order: np.ndarray) -> None:
        """Image b's locked triangles' indices after an operation that puts old triangle
        ``order[k]`` at k; refused if it would drop one or change their order."""
        idx = self.locks[b]
        if not len(idx):
            return
        where = np.full(self.n_triangles, -1, dtype=np.int64)
        where[np.asarray(order)] = np.arange(len(order))
        moved = where[idx]
        if np.any(moved < 0) or np.any(np.diff(moved) <= 0):
            raise ValueError(f"an operation would drop or reorder locked triangles of image {b} ({idx.tolist()})")
        self.locks[b] = moved

    def _spare_locked(self, dead: list, new: list) -> tuple[list, list]:
        """``dead`` and ``new`` (per image) without the locked triangles and their rows of ``new``."""
        out_dead, out_new = [], []
        for b, (d, fresh) in enumerate(zip(dead, new)):
            d = np.asarray(d, dtype=np.int64)
            spare = ~np.isin(d, self.locks[b])
            out_dead.append(d[spare])
            out_new.append(None if fresh is None else np.asarray(fresh)[spare])
        return out_dead, out_new


def half_size(targets: np.ndarray, s: FitSettings) -> np.ndarray | None:
    """The targets at half size (LANCZOS) for the coarse stage, or None when there is none."""
    H, W = targets.shape[1:3]
    if s.coarse_fraction <= 0 or max(W, H) // 2 < s.coarse_min_size:
        return None
    from PIL import Image

    out = []
    for t in targets:
        im = Image.fromarray((np.clip(t, 0, 1) * 255 + 0.5).astype(np.uint8), "RGB")
        small = im.resize((max(1, W // 2), max(1, H // 2)), Image.Resampling.LANCZOS)
        out.append(np.asarray(small, dtype=np.float32) / 255.0)
    return np.stack(out)
