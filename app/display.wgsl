// Display pass of the trifit window: the fitter's live image (already unpacked on the device
// into an rgba8 texture by unpack.wgsl) and the target, drawn into the canvas texture.
// One triangle per pane, clipped to the pane by the viewport.
// Pane rectangles are computed on the host (app/canvas.py: layout_panes) in physical pixels.
// struct View (the uniform) is generated from app/panes.py VIEW (render/gpu/layouts.py).

// Pipeline constants (app/canvas.py makes one pipeline per output format and view mode): the
// branches on them are resolved when the pipeline is built. On a CPU adapter (llvmpipe) every
// branch of a shader runs, masked, for every pixel, so a mode chosen at run time cost all three
// modes' texture samples and the sRGB conversion's pow() on every frame.
override MODE: u32 = 0u;      // as View.mode
override SRGB_OUT: u32 = 0u;  // 1: the output texture is sRGB (as View.flags bit 2)
override PANE: u32 = 1u;      // which pane this draw call covers (its viewport)
override EDIT: u32 = 0u;      // 1: edit mode or a focus mask: the selection outline and mask overlay

@group(0) @binding(0) var<uniform> view: View;
@group(0) @binding(1) var rendered: texture_2d<f32>;
@group(0) @binding(2) var target_image: texture_2d<f32>;
@group(0) @binding(3) var bilinear: sampler;
// Edit mode (app/edit_tool.py): the selected triangles, two vec4s each in frame coordinates,
// (x0, y0, x1, y1) and (x2, y2, locked, 0); and the focus mask painted over the target.
@group(0) @binding(4) var<storage, read> outline: array<vec4<f32>>;
@group(0) @binding(5) var focus_mask: texture_2d<f32>;

const BACKGROUND = vec3<f32>(0.13, 0.13, 0.14);
const EMPTY_PANE = vec3<f32>(0.22, 0.22, 0.24);
const SPLIT_LINE = vec3<f32>(1.0, 0.85, 0.2);
const ERROR_GAIN = 4.0;  // a mean absolute error of 0.25 already saturates the heatmap

@vertex
fn vs_main(@builtin(vertex_index) index: u32) -> @builtin(position) vec4<f32> {
    // A triangle covering the whole clip square: (-1,-1), (3,-1), (-1,3).
    let x = f32(i32(index & 1u) * 4 - 1);
    let y = f32(i32(index >> 1u) * 4 - 1);
    return vec4<f32>(x, y, 0.0, 1.0);
}

// An explicit level (the textures have no mipmaps) so that sampling may sit in per-pixel branches,
// which implicit-derivative textureSample may not.
fn sample_rendered(uv: vec2<f32>) -> vec3<f32> {
    return textureSampleLevel(rendered, bilinear, uv, 0.0).rgb;
}

fn sample_target(uv: vec2<f32>) -> vec3<f32> {
    return textureSampleLevel(target_image, bilinear, uv, 0.0).rgb;
}

// Black -> violet -> orange -> pale yellow, for an error in [0, 1].
fn heat(e: f32) -> vec3<f32> {
    let t = clamp(e, 0.0, 1.0);
    let c0 = vec3<f32>(0.0, 0.0, 0.02);
    let c1 = vec3<f32>(0.45, 0.07, 0.55);
    let c2 = vec3<f32>(0.95, 0.45, 0.1);
    let c3 = vec3<f32>(1.0, 1.0, 0.75);
    if (t < 0.33) {
        return mix(c0, c1, t / 0.33);
    }
    if (t < 0.66) {
        return mix(c1, c2, (t - 0.33) / 0.33);
    }
    return mix(c2, c3, (t - 0.66) / 0.34);
}

fn inside(p: vec2<f32>, r: vec4<f32>) -> bool {
    return p.x >= r.x && p.y >= r.y && p.x < r.z && p.y < r.w;
}

fn pane_uv(p: vec2<f32>, r: vec4<f32>) -> vec2<f32> {
    return (p - r.xy) / (r.zw - r.xy);
}

fn srgb_to_linear(c: vec3<f32>) -> vec3<f32> {
    let lo = c / 12.92;
    let hi = pow((c + 0.055) / 1.055, vec3<f32>(2.4));
    return select(hi, lo, c <= vec3<f32>(0.04045));
}

// Each pane is drawn by its own draw call with the viewport set to the pane (PANE 1: pane_a,
// 2: pane_b), so only pixels inside a pane are shaded and each samples what its pane shows; the
// gaps keep the pass's clear colour.
fn shade(p: vec2<f32>) -> vec3<f32> {
    let render_ok = (view.flags & 1u) != 0u;
    let target_ok = (view.flags & 2u) != 0u;
    if (MODE == 1u) {  // overlay: one pane, render left of the split, target right of it
        let r = view.pane_a;
        let split_x = r.x + view.split * (r.z - r.x);
        if (abs(p.x - split_x) < 0.5 * view.line_px) {
            return SPLIT_LINE;
        }
        if (p.x < split_x) {
            return select(EMPTY_PANE, sample_rendered(pane_uv(p, r)), render_ok);
        }
        return select(EMPTY_PANE, sample_target(pane_uv(p, r)), target_ok);
    }
    if (MODE == 2u) {  // render beside the error heatmap
        if (PANE == 1u) {
            return select(EMPTY_PANE, sample_rendered(pane_uv(p, view.pane_a)), render_ok);
        }
        if (!(render_ok && target_ok)) {
            return EMPTY_PANE;
        }
        let uv = pane_uv(p, view.pane_b);
        let d = abs(sample_rendered(uv) - sample_target(uv));
        return heat(ERROR_GAIN * (d.r + d.g + d.b) / 3.0);
    }
    if (PANE == 1u) {  // side by side: target, then render
        return select(EMPTY_PANE, sample_target(pane_uv(p, view.pane_a)), target_ok);
    }
    return select(EMPTY_PANE, sample_rendered(pane_uv(p, view.pane_b)), render_ok);
}

const OUTLINE = vec3<f32>(1.0, 0.85, 0.2);
const OUTLINE_LOCKED = vec3<f32>(0.35, 0.85, 1.0);
const HALO = vec3<f32>(0.05, 0.05, 0.05);
const FOCUS_TINT = vec3<f32>(1.0, 0.35, 0.1);

// The pane this draw covers, and whether it shows the target there (where the mask is painted).
fn this_pane() -> vec4<f32> {
    if (PANE == 2u) {
        return view.pane_b;
    }
    return view.pane_a;
}

fn shows_target(p: vec2<f32>) -> bool {
    if (MODE == 1u) {
        return p.x >= view.pane_a.x + view.split * (view.pane_a.z - view.pane_a.x);
    }
    if (MODE == 2u) {
        return PANE == 2u;  // the heatmap: where the error is weighed
    }
    return PANE == 1u;
}

// Tint the painted focus mask over the target and draw the rubber band: the pixel's colour over
// `c`. (The selection's outlines are geometry of their own, vs_outline below: a loop over the
// selection in every pixel cost a CPU adapter hundreds of ms a frame.)
fn edit_overlay(p: vec2<f32>, c_in: vec3<f32>) -> vec3<f32> {
    var c = c_in;
    let r = this_pane();
    if ((view.edit_flags & 1u) != 0u && shows_target(p)) {
        let m = textureSampleLevel(focus_mask, bilinear, pane_uv(p, r), 0.0).r;
        c = mix(c, FOCUS_TINT, 0.5 * m);
    }
    if ((view.edit_flags & 2u) != 0u) {
        let band = view.band;
        let inside_band = p.x >= band.x - 0.5 && p.x <= band.z + 0.5 && p.y >= band.y - 0.5 && p.y <= band.w + 0.5;
        let edge = min(min(abs(p.x - band.x), abs(p.x - band.z)), min(abs(p.y - band.y), abs(p.y - band.w)));
        if (inside_band && edge < 1.0) {
            return vec3<f32>(1.0);
        }
    }
    return c;
}

@fragment
fn fs_main(@builtin(position) frag: vec4<f32>) -> @location(0) vec4<f32> {
    // The images hold display-referred (sRGB-encoded) values; an sRGB target would encode again.
    var c = shade(frag.xy);
    if (EDIT != 0u) {
        c = edit_overlay(frag.xy, c);
    }
    if (SRGB_OUT != 0u) {
        c = srgb_to_linear(c);
    }
    return vec4<f32>(c, 1.0);
}

// The selection's outlines, drawn over a pane (app/canvas.py: viewport = the surface, scissor =
// the pane): instance 3k + e is a quad along edge e of selected triangle k, one outline wide plus
// a 1 px halo each side; instances from 3 x outlines on are the vertex handles, squares.
struct OutlineOut {
    @builtin(position) pos: vec4<f32>,
    @location(0) local: vec2<f32>,                  // px: along / across an edge, or from a vertex
    @location(1) @interpolate(flat) kind: u32,      // 0 edge, 1 a locked one's edge, 2 handle
}

@vertex
fn vs_outline(@builtin(vertex_index) vi: u32, @builtin(instance_index) inst: u32) -> OutlineOut {
    var corners = array<vec2<f32>, 6>(vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(0.0, 1.0),
                                      vec2<f32>(0.0, 1.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0));
    let c = corners[vi] * 2.0 - 1.0;
    let r = this_pane();
    let size = r.zw - r.xy;
    let n = view.outlines;
    let k = (inst % (3u * n)) / 3u;
    let e = inst % 3u;
    let q = outline[2u * k];
    let s = outline[2u * k + 1u];
    var verts = array<vec2<f32>, 3>(q.xy, q.zw, s.xy);
    let a = r.xy + verts[e] * size;
    var out: OutlineOut;
    var p: vec2<f32>;
    if (inst < 3u * n) {
        let b = r.xy + verts[(e + 1u) % 3u] * size;
        let half = 0.5 * view.outline_px + 1.0;
        let len = max(length(b - a), 1e-6);
        let d = (b - a) / len;
        let side = vec2<f32>(-d.y, d.x);
        let along = 0.5 * (c.x + 1.0) * (len + 2.0 * half) - half;
        p = a + d * along + side * c.y * half;
        out.local = vec2<f32>(along, c.y * half);
        out.kind = select(0u, 1u, s.z > 0.5);
    } else {
        p = a + c * view.handle_px;
        out.local = c * view.handle_px;
        out.kind = 2u;
    }
    out.pos = vec4<f32>(p.x / view.surface.x * 2.0 - 1.0, 1.0 - p.y / view.surface.y * 2.0, 0.0, 1.0);
    return out;
}

@fragment
fn fs_outline(in: OutlineOut) -> @location(0) vec4<f32> {
    var c = HALO;
    if (in.kind == 2u) {
        let d = max(abs(in.local.x), abs(in.local.y));
        c = select(vec3<f32>(1.0), HALO, d > view.handle_px - 1.0);
    } else if (abs(in.local.y) < 0.5 * view.outline_px) {
        c = select(OUTLINE, OUTLINE_LOCKED, in.kind == 1u);
    }
    if (SRGB_OUT != 0u) {
        c = srgb_to_linear(c);
    }
    return vec4<f32>(c, 1.0);
}
