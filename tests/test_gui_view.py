"""GUI tests of the view: the empty canvas says what to do (also after a failed open), and the
render-beside-target view goes side by side or stacked, whichever shows the pictures larger for
the view's shape and the image's -- re-decided when the window is resized or another image opens.

Run: ``xvfb-run -a pytest tests/test_gui_view.py`` (lavapipe; under CI=true a missing adapter fails).
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from conftest import open_window  # noqa: E402
from PIL import Image  # noqa: E402
from PySide6 import QtGui, QtWidgets  # noqa: E402

import trifit.app  # noqa: E402,F401  (installs the PySide6 refcount guard first)
from trifit.app.panes import PANE_GAP_PX, ViewMode, layout_panes  # noqa: E402
from trifit.app.window import MainWindow  # noqa: E402

pytestmark = pytest.mark.gui

WAIT_MS = 20_000
HINT = "Open an image (Ctrl+O) or drop one here"
BACKGROUND = np.array([33, 33, 36])  # display.wgsl's BACKGROUND, the gaps around the panes


@pytest.fixture
def window(qtbot, warm_engine, gui_settings):
    yield from open_window(qtbot, warm_engine, gui_settings)


def _picture(path, width: int, height: int):
    """A bright gradient (never the canvas's dark background) saved as PNG."""
    x, y = np.meshgrid(np.linspace(0, 1, width), np.linspace(0, 1, height))
    rgb = np.stack([120 + 120 * x, 140 + 100 * y, 210 - 60 * x * y], axis=-1)
    Image.fromarray(rgb.astype(np.uint8)).save(path)
    return str(path)


def _grab(widget: QtWidgets.QWidget) -> np.ndarray:
    """What the X server shows of ``widget`` (what a screenshot holds), H x W x 3 uint8; the
    widget's own rendering off X11."""
    QtWidgets.QApplication.processEvents()
    if QtGui.QGuiApplication.platformName() == "xcb":
        image = widget.screen().grabWindow(widget.winId()).toImage()
    else:
        image = widget.grab().toImage()
    return _to_array(image)


def _canvas_pixels(win: MainWindow) -> np.ndarray:
    canvas = win.canvas
    if QtGui.QGuiApplication.platformName() == "xcb" and getattr(canvas, "present_method", "") == "screen":
        return _grab(canvas)
    return canvas.snapshot()[..., :3]


def _runs(occupied: np.ndarray) -> int:
    """How many separate runs of True ``occupied`` has."""
    o = occupied.astype(np.int8)
    return int(o[0]) + int(np.sum(np.diff(o) == 1))


def _arrangement(pixels: np.ndarray) -> str:
    """'side' or 'stacked' from where the canvas shows anything but its background."""
    shown = np.abs(pixels.astype(np.int16) - BACKGROUND).max(axis=2) > 12
    cols, rows = _runs(shown.any(axis=0)), _runs(shown.any(axis=1))
    if (cols, rows) == (2, 1):
        return "side"
    if (cols, rows) == (1, 2):
        return "stacked"
    return f"unclear ({cols} column runs, {rows} row runs)"


def _to_array(image: QtGui.QImage) -> np.ndarray:
    image = image.convertToFormat(QtGui.QImage.Format.Format_RGB888)
    w, h = image.width(), image.height()
    data = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * h)
    return data.reshape(h, image.bytesPerLine())[:, : w * 3].reshape(h, w, 3).copy()


def _hint_on_screen(win: MainWindow) -> bool:
    """Whether the window's picture (what a screenshot holds) shows the hint: the area where the
    hint sits looks like the hint drawn on its own, text included."""
    hint = win.canvas_view.hint
    alone = _to_array(hint.grab().toImage())
    assert int((alone.min(axis=2) > 150).sum()) > 50, "the hint has no legible text"
    pixels = _grab(win)
    top_left = hint.mapTo(win, hint.rect().topLeft())
    ratio = win.devicePixelRatioF()
    x0, y0 = round(top_left.x() * ratio), round(top_left.y() * ratio)
    area = pixels[y0:y0 + alone.shape[0], x0:x0 + alone.shape[1]]
    return area.shape == alone.shape and float(np.abs(area.astype(np.int16) - alone).mean()) < 8.0


# ---------------------------------------------------------------------- the empty canvas
def test_the_empty_canvas_says_what_to_do_until_an_image_opens(qtbot, window, tmp_path):
    win = window
    view = win.canvas_view
    assert view.hint_shown and view.hint.isVisible() and not win.canvas.isVisible()
    assert view.hint.text() == HINT
    assert _hint_on_screen(win), "the hint is not in the window's picture"

    # a bad file: the canvas stays empty and says what to do (no stale "Opening…", no blank view)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\nnot a picture at all")
    win.open_image(broken)
    assert view.hint.text().startswith("Opening broken.png")
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=WAIT_MS)
    assert "broken.png" in win.last_error[1]
    assert win.fit_info is None
    assert view.hint_shown and view.hint.isVisible() and view.hint.text() == HINT
    # nothing to save, export, start or reset yet: those are off, not silent
    assert not any(a.isEnabled() for a in win.fit_actions) and not win.controls.reset_button.isEnabled()
    assert not win.canvas.isVisible()
    for box in win.findChildren(QtWidgets.QMessageBox):
        box.close()
    qtbot.wait(50)
    assert _hint_on_screen(win)

    # an image: the hint goes, the canvas shows the picture
    win.open_image(_picture(tmp_path / "ok.png", 90, 60))
    qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
    assert not view.hint_shown and not view.hint.isVisible() and win.canvas.isVisible()
    assert all(a.isEnabled() for a in win.fit_actions) and win.controls.reset_button.isEnabled()
    qtbot.waitUntil(lambda: _arrangement(_canvas_pixels(win)) in ("side", "stacked"), timeout=WAIT_MS)
    assert not _hint_on_screen(win)

    # a bad file now leaves the open image alone (and shows no hint)
    win.last_error = None
    win.open_image(broken)
    qtbot.waitUntil(lambda: win.last_error is not None, timeout=WAIT_MS)
    assert not view.hint_shown and win.canvas.isVisible()


# ---------------------------------------------------------------------- side by side or stacked
def _scales(canvas_w: float, canvas_h: float, img_w: int, img_h: int, gap: float = PANE_GAP_PX):
    """How large each picture could be (scale of the image) beside the other and above it."""
    beside = min((canvas_w - 3 * gap) / 2 / img_w, (canvas_h - 2 * gap) / img_h)
    above = min((canvas_w - 2 * gap) / img_w, (canvas_h - 3 * gap) / 2 / img_h)
    return beside, above


def _layout(canvas_w, canvas_h, img_w, img_h) -> str:
    a, b = layout_panes(ViewMode.SIDE_BY_SIDE, canvas_w, canvas_h, img_w, img_h)
    if b[0] >= a[2]:
        return "side"
    assert b[1] >= a[3], (a, b)
    return "stacked"


def test_landscape_and_portrait_pictures_take_the_larger_arrangement():
    # a landscape picture in a wide view: beside each other when that is larger...
    assert _layout(1000, 600, 300, 200) == "side"
    beside, above = _scales(1000, 600, 300, 200)
    assert beside > above
    # ...and stacked in a view only a little wider than tall, where stacking shows it larger
    assert _layout(800, 700, 300, 200) == "stacked"
    beside, above = _scales(800, 700, 300, 200)
    assert above > beside
    # a portrait picture in a wide view: always beside each other
    for w, h in ((800, 700), (1000, 600), (1600, 500), (701, 700)):
        assert _layout(w, h, 200, 300) == "side", (w, h)


def test_each_pane_is_as_large_as_either_arrangement_allows():
    rng = random.Random(18)
    for _ in range(2000):
        cw, ch = rng.uniform(120, 2400), rng.uniform(120, 1600)
        iw, ih = rng.randint(16, 4000), rng.randint(16, 4000)
        a, b = layout_panes(ViewMode.SIDE_BY_SIDE, cw, ch, iw, ih)
        best = max(_scales(cw, ch, iw, ih))
        for pane in (a, b):
            assert abs((pane[2] - pane[0]) - iw * best) <= 1.01 and abs((pane[3] - pane[1]) - ih * best) <= 1.01
        assert not (a[2] > b[0] and a[3] > b[1]), "the panes overlap"
        for x0, y0, x1, y1 in (a, b):
            assert x0 >= PANE_GAP_PX - 1 and y0 >= PANE_GAP_PX - 1 and x1 <= cw - PANE_GAP_PX + 1 and y1 <= ch - PANE_GAP_PX + 1


def test_the_arrangement_follows_window_resizes_and_new_images(qtbot, window, tmp_path):
    win = window
    win.controls_dock.hide()
    win.plots_dock.hide()
    landscape = _picture(tmp_path / "landscape.png", 300, 200)
    portrait = _picture(tmp_path / "portrait.png", 200, 300)

    def shows(expected: str, what: str) -> None:
        cw, ch = win.canvas.width(), win.canvas.height()
        w, h = win.fit_info.width, win.fit_info.height
        beside, above = _scales(cw, ch, w, h)
        assert (beside > above) == (expected == "side"), (what, cw, ch, beside, above)  # the larger one
        try:
            qtbot.waitUntil(lambda: _arrangement(_canvas_pixels(win)) == expected, timeout=WAIT_MS)
        except AssertionError:
            raise AssertionError(f"{what}: the canvas ({cw}x{ch}) shows {_arrangement(_canvas_pixels(win))}, "
                                 f"not {expected}") from None

    win.resize(1100, 520)
    win.open_image(landscape)
    qtbot.waitUntil(lambda: win.fit_info is not None, timeout=WAIT_MS)
    shows("side", "a landscape picture in a wide window")
    win.resize(620, 800)
    shows("stacked", "the same picture after the window was made tall")
    win.open_image(portrait)
    qtbot.waitUntil(lambda: win.fit_info.source.endswith("portrait.png"), timeout=WAIT_MS)
    shows("side", "a portrait picture opened in that window")
    win.resize(1100, 520)
    shows("side", "the portrait picture in a wide window")
    win.set_view_mode(ViewMode.ERROR_HEATMAP)  # the error view lays out its two panes alike
    win.start_fit()
    qtbot.waitUntil(lambda: win.last_stats is not None, timeout=WAIT_MS)
    win.resize(620, 800)
    shows("side", "the error view of the portrait picture in a tall window")
    win.pause_fit()


def test_open_recent_lists_the_latest_first_and_offers_no_missing_file(qtbot, window, tmp_path):
    win = window
    paths = [Path(_picture(tmp_path / f"{name}.png", 90, 60)) for name in ("first", "second", "third")]
    for path in paths:
        win.open_image(path)
        qtbot.waitUntil(lambda p=path: win.fit_info is not None and win.fit_info.source == str(p), timeout=WAIT_MS)
    paths[0].unlink()
    win._fill_recent_menu()  # (as the menu does when it is about to show)
    entries = [(a.text(), a.isEnabled(), a.toolTip()) for a in win.recent_menu.actions()]
    assert entries[:3] == [("third.png", True, str(paths[2].resolve())), ("second.png", True, str(paths[1].resolve())),
                           ("first.png (missing)", False, str(paths[0].resolve()))]
    win.recent_menu.actions()[1].trigger()  # a present one opens
    qtbot.waitUntil(lambda: win.fit_info.source == str(paths[1].resolve()), timeout=WAIT_MS)
