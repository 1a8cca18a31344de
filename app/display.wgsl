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

@group(0) @binding(0) var<uniform> view: View;
@group(0) @binding(1) var rendered: texture_2d<f32>;
@group(0) @binding(2) var target_image: texture_2d<f32>;
@group(0) @binding(3) var bilinear: sampler;

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

@fragment
fn fs_main(@builtin(position) frag: vec4<f32>) -> @location(0) vec4<f32> {
    // The images hold display-referred (sRGB-encoded) values; an sRGB target would encode again.
    var c = shade(frag.xy);
    if (SRGB_OUT != 0u) {
        c = srgb_to_linear(c);
    }
    return vec4<f32>(c, 1.0);
}
