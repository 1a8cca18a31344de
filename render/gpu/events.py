"""Placement on the device: the mechanism behind ``FitSettings.placement = "device"``.

A growth or respawn event places triangles where the error of the current render is largest.
Here that render stays on the device: ``error_tiles`` sums each 16 x 16 tile's (focus-weighted)
squared error in a fixed order and brings back only the sums (4 bytes a tile); the host samples
tiles by them (render/placement.py, with the fit's own random stream); ``place`` finds the pixel
inside each sampled tile and shapes the triangle to the patch around it (shaders/events.wgsl).
For the fit's growth and respawn, ``place_rows`` then turns the triangles into the rows the fit
loop's gather takes, on the device: nothing comes back (``place`` brings back 48 bytes a triangle,
for callers that want the values). The targets and focus maps at full size are uploaded once per
fit; the render is the fit loop's last forward, or a render of the current scene on the device
(the half-size stage, whose forward is not at full size).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..fitloop import FRESH_ROW, logit
from .layouts import PLACE
from .workspace import COPY_DST, COPY_SRC, MAP_READ, STORAGE, TILE, UNIFORM

PLACE_IN = 12   # floats per new triangle's record in (shaders/events.wgsl: render/gpu/shaders.py writes these in)
PLACE_OUT = 12  # ... and out (a gather's fresh row is another size: FRESH_ROW, render/fitloop.py)


@dataclass
class DeviceRows:
    """``n`` fresh rows (n, FRESH_ROW) float32 in a device buffer: new triangles as the fit loop's
    gather takes them, grouped by image in order (:meth:`DevicePlacement.place_rows`). ``pending``:
    the command encoder holding the passes that make them, not yet submitted -- the gather that
    takes them encodes its own commands after those and submits both at once."""

    buffer: object
    n: int
    pending: object = None

    def __len__(self) -> int:
        return self.n

    def encoder(self, device):
        """The pending command encoder (once; the rows' passes come first in it), or a new one."""
        enc, self.pending = self.pending, None
        return device.create_command_encoder() if enc is None else enc


class DevicePlacement:
    """The buffers and passes of placement on the device for B full-size targets (B, H, W, 3)
    and their focus maps (B, H, W) or None."""

    def __init__(self, backend, targets: np.ndarray, weights: np.ndarray | None):
        self.backend = backend
        self.device = backend.device
        B, H, W = targets.shape[:3]
        self.batch, self.height, self.width = B, H, W
        self.tiles_x, self.tiles_y = -(-W // TILE), -(-H // TILE)
        self.weighted = weights is not None
        pool = backend.pool
        self._pool = pool
        self.buffers = {
            "place": pool.acquire(UNIFORM | COPY_DST, PLACE.size, "place"),
            "target_img": pool.acquire(STORAGE | COPY_DST, B * H * W * 12, "place-target"),
            "weights": pool.acquire(STORAGE | COPY_DST, max(16, B * H * W * 4 if weights is not None else 16),
                                    "place-weights"),
            "err": pool.acquire(STORAGE, B * H * W * 4, "place-err"),
            "tile_err": pool.acquire(STORAGE | COPY_SRC, B * self.n_tiles * 4, "place-tiles"),
        }
        self._new_cap = 0
        self._read = {}
        up = self._write("place", PLACE.pack(width=W, height=H, tiles_x=self.tiles_x, tiles_y=self.tiles_y,
                                             weighted=int(weights is not None), n_new=0, alpha_raw=0.0))
        up += self._write("target_img", np.ascontiguousarray(targets, dtype=np.float32))
        if weights is not None:
            up += self._write("weights", np.ascontiguousarray(weights, dtype=np.float32))
        backend.counters.upload_bytes += up
        self._groups: dict = {}

    @property
    def n_tiles(self) -> int:
        return self.tiles_x * self.tiles_y

    def _write(self, name: str, data) -> int:
        return self._write_at(name, 0, data)

    def _write_at(self, name: str, offset: int, data) -> int:
        raw = data if isinstance(data, bytes) else memoryview(np.ascontiguousarray(data)).cast("B")
        self.device.queue.write_buffer(self.buffers[name], offset, raw)
        return len(raw)

    def _pipeline(self, entry: str):
        from . import shaders

        # (the variant a workspace asks for, so the fit loop's start builds this same pipeline)
        return shaders.pipeline(self.device, "events.wgsl", entry, self.backend.subgroups,
                                subgroup_size=self.backend.ctx.subgroup_size)

    def _bind(self, entry: str, names: list[str], image) -> tuple:
        key = (entry, id(image), self._new_cap)
        found = self._groups.get(key)
        if found is not None and found[2] is image:
            return found[:2]
        pl = self._pipeline(entry)
        bufs = {**self.buffers, "image": image}
        slots = {"place": 0, "image": 1, "target_img": 2, "weights": 3, "err": 4, "tile_err": 5,
                 "new_in": 6, "new_out": 7, "rows": 8}
        entries = [{"binding": slots[n], "resource": {"buffer": bufs[n]}} for n in names]
        bg = self.device.create_bind_group(layout=pl.get_bind_group_layout(0), entries=entries)
        if len(self._groups) > 8:
            self._groups.clear()
        self._groups[key] = (pl, bg, image)
        return pl, bg

    def _staging(self, size: int):
        buf = self._read.get(size)
        if buf is None:
            buf = self._pool.acquire(MAP_READ | COPY_DST, size, "read:place")
            self._read[size] = buf
        return buf

    def _encode_pass(self, entry: str, names: list[str], image, groups: tuple[int, int, int], enc=None):
        """One compute pass of ``entry`` over ``groups`` workgroups, into ``enc`` or a new command
        encoder; returns the encoder."""
        pl, bg = self._bind(entry, names, image)
        enc = self.device.create_command_encoder() if enc is None else enc
        cpass = enc.begin_compute_pass()
        cpass.set_pipeline(pl)
        cpass.set_bind_group(0, bg)
        cpass.dispatch_workgroups(*groups)
        cpass.end()
        return enc

    def _submit_read(self, enc, source, size: int) -> np.ndarray:
        staging = self._staging(size)
        enc.copy_buffer_to_buffer(source, 0, staging, 0, size)
        self.device.queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        from .workspace import Workspace

        out = Workspace.read(staging, size)
        self.backend.counters.read("events", size)
        return out

    def error_tiles(self, image) -> np.ndarray:
        """(B, tiles_y * tiles_x) float32: each tile's summed (weighted) squared error of the
        render in ``image`` (a device buffer, (B, H, W, 3) float32) against the targets; the
        per-pixel errors stay on the device for :meth:`place`."""
        enc = self.encode_error_tiles(self.device.create_command_encoder(), image)
        return self._submit_read(enc, self.buffers["tile_err"], self.sums_bytes).reshape(self.batch, self.n_tiles)

    def encode_error_tiles(self, enc, image):
        """:meth:`error_tiles`'s pass into the command encoder ``enc`` (the fit loop's last
        submission before an event that may place: the sums come back with its losses);
        returns ``enc``. The sums are then in ``buffers["tile_err"]`` (:attr:`sums_bytes`)."""
        names = ["place", "image", "target_img", "weights", "err", "tile_err"]
        return self._encode_pass("error_tiles", names, image, (self.tiles_x, self.tiles_y, self.batch), enc)

    @property
    def sums_bytes(self) -> int:
        return self.batch * self.n_tiles * 4

    def place(self, image, records: np.ndarray) -> np.ndarray:
        """(n, PLACE_OUT) float32: a triangle for each record (n, PLACE_IN) of
        shaders/events.wgsl, against the errors the last :meth:`error_tiles` of ``image`` left."""
        n = self._records(records)
        if n == 0:
            return np.zeros((0, PLACE_OUT), np.float32)
        enc = self._encode_place(image, n)
        return self._submit_read(enc, self.buffers["new_out"], n * PLACE_OUT * 4).reshape(n, PLACE_OUT)

    def place_rows(self, image, records: np.ndarray, alpha: float, submit: bool = True) -> DeviceRows:
        """:meth:`place`, with the triangles (opacity ``alpha``) turned on the device into the rows
        the fit loop's gather takes (shaders/events.wgsl placed_rows; each image's larger ones
        first): nothing comes back. The rows stay valid until the next placement. ``submit``
        False: the passes are left in the rows' ``pending`` encoder for the gather to submit with
        its own (an event's placement and gather in one submission); nothing else may write the
        placement's buffers or ``image`` before that."""
        n = self._records(records)
        if n == 0:
            return DeviceRows(None, 0)
        self.backend.counters.upload_bytes += self._write_at("place", *PLACE.pack_at(
            n_new=n, alpha_raw=float(logit(np.float64(alpha)))))
        enc = self._encode_place(image, n)
        self._encode_pass("placed_rows", ["place", "new_in", "new_out", "rows"], image, (-(-n // 64), 1, 1), enc)
        if not submit:
            return DeviceRows(self.buffers["rows"], n, pending=enc)
        self.device.queue.submit([enc.finish()])
        self.backend.counters.submissions += 1
        return DeviceRows(self.buffers["rows"], n)

    def _records(self, records: np.ndarray) -> int:
        """Upload the new triangles' records (buffers grown to hold them); returns their count."""
        records = np.ascontiguousarray(records, dtype=np.float32)
        n = len(records)
        if n == 0:
            return 0
        if n > self._new_cap:
            for name in ("new_in", "new_out", "rows"):
                if name in self.buffers:
                    self._pool.release(self.buffers.pop(name))
            cap = max(64, 1 << (n - 1).bit_length())
            self.buffers["new_in"] = self._pool.acquire(STORAGE | COPY_DST, cap * PLACE_IN * 4, "place-in")
            self.buffers["new_out"] = self._pool.acquire(STORAGE | COPY_SRC, cap * PLACE_OUT * 4, "place-out")
            self.buffers["rows"] = self._pool.acquire(STORAGE | COPY_SRC, cap * FRESH_ROW * 4, "place-rows")
            self._new_cap = cap
        self.backend.counters.upload_bytes += self._write("new_in", records)
        return n

    def _encode_place(self, image, n: int):
        names = ["place", "image", "target_img", "err", "new_in", "new_out"]
        return self._encode_pass("place_new", names, image, (n, 1, 1))

    def release(self) -> None:
        for buf in list(self.buffers.values()) + list(self._read.values()):
            self._pool.release(buf)
        self.buffers, self._read, self._groups = {}, {}, {}
