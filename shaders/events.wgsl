// Placement on the device (render/gpu/events.py; the policy and the host's half of the sampling
// are render/placement.py's): what growth and respawn need of the image, without bringing it back.
//
// error_tiles: dispatch (tiles_x, tiles_y, batch), one 16x16 workgroup per tile: each pixel's
//   squared error (times its focus weight) into `err`, and the tile's sum, a fixed-order tree,
//   into `tile_err` -- the host samples tiles by these (a few hundred bytes, not the image).
// place: dispatch (n_new, 1, 1), one workgroup per new triangle: the pixel inside its sampled tile
//   (a serial prefix over the tile's errors, so it is the same on every run), then the patch
//   around it that wants the same colour change (placement.shapes_to_residual): its centroid,
//   second moments and mean target colour, summed in a fixed order, and the triangle with them.
//
// A new triangle's record in `new_in` (PLACE_IN floats): image, tile (u32 bits), the fraction of
// the tile's error sum where the pixel is, the centre's jitter x, y in the pixel, circumradius px,
// first corner's angle, three angle jitters (the random rule), the error floor per pixel, shaped
// (1: shape to the residual, 0: the random rule). Out (PLACE_OUT floats): six vertex coordinates
// (frame units), rgb, size in px (circumradius), shaped (1 when the residual gave the shape).
// placed_rows: dispatch (ceil(n_new / 64), 1, 1): the placed triangles as the rows the fit loop's
//   gather takes (permute.wgsl's fresh rows: raw parameters, then the record values they
//   materialise to), each image's larger ones first as the host orders them
//   (placement.device_triangles), so nothing comes back to the host on the way.

const PLACE_THREADS: u32 = 64u;
// (PLACE_IN, PLACE_OUT, FRESH_ROW -- a gather's fresh row: 10 raw parameters, then 10 record
// values -- and LOGIT_EPS, VAR_PER_R2, MIN_VAR_PX, MAX_SAMPLES_PER_SIDE: the host's values,
// written in by render/gpu/shaders.py `constants`)
const TWO_PI_3: f32 = 2.0943951023931953;

@group(0) @binding(0) var<uniform> place: Place;
@group(0) @binding(1) var<storage, read> image: array<f32>;    // (B, H, W, 3): the render placed against
@group(0) @binding(2) var<storage, read> target_img: array<f32>;   // (B, H, W, 3)
@group(0) @binding(3) var<storage, read> weights: array<f32>;  // (B, H, W) focus maps (unread unless weighted)
@group(0) @binding(4) var<storage, read_write> err: array<f32>;       // (B, H, W)
@group(0) @binding(5) var<storage, read_write> tile_err: array<f32>;  // (B, tiles_y * tiles_x)
@group(0) @binding(6) var<storage, read> new_in: array<f32>;          // (n_new, PLACE_IN)
@group(0) @binding(7) var<storage, read_write> new_out: array<f32>;   // (n_new, PLACE_OUT)
@group(0) @binding(8) var<storage, read_write> rows: array<f32>;      // (n_new, FRESH_ROW)

var<workgroup> tile_sums: array<f32, 256>;
var<workgroup> sums: array<array<f32, 9>, PLACE_THREADS>;
var<workgroup> picked: u32;

fn rgb_at(buf_is_target: bool, p: u32) -> vec3f {
    if (buf_is_target) {
        return vec3f(target_img[3u * p], target_img[3u * p + 1u], target_img[3u * p + 2u]);
    }
    return vec3f(image[3u * p], image[3u * p + 1u], image[3u * p + 2u]);
}

@compute @workgroup_size(16, 16)
fn error_tiles(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
               @builtin(local_invocation_index) li: u32) {
    let W = place.width;
    let H = place.height;
    let b = wid.z;
    let x = wid.x * 16u + lid.x;
    let y = wid.y * 16u + lid.y;
    var e = 0.0;
    if (x < W && y < H) {
        let p = (b * H + y) * W + x;
        let r = rgb_at(true, p) - rgb_at(false, p);
        e = r.x * r.x + r.y * r.y + r.z * r.z;
        if (place.weighted != 0u) {
            e = e * weights[p];
        }
        err[p] = e;
    }
    tile_sums[li] = e;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s >> 1u) {
        if (li < s) {
            tile_sums[li] = tile_sums[li] + tile_sums[li + s];
        }
        workgroupBarrier();
    }
    if (li == 0u) {
        tile_err[b * place.tiles_x * place.tiles_y + wid.y * place.tiles_x + wid.x] = tile_sums[0];
    }
}

@compute @workgroup_size(64)
fn place_new(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let W = place.width;
    let H = place.height;
    let at = wid.x * PLACE_IN;
    let b = bitcast<u32>(new_in[at]);
    let tile = bitcast<u32>(new_in[at + 1u]);
    let x0t = (tile % place.tiles_x) * 16u;
    let y0t = (tile / place.tiles_x) * 16u;
    let floor_px = new_in[at + 10u];
    if (li == 0u) {
        // the pixel: the first whose running sum (row by row inside the tile) passes the fraction
        let xe = min(x0t + 16u, W);
        let ye = min(y0t + 16u, H);
        var total = 0.0;
        for (var y = y0t; y < ye; y++) {
            for (var x = x0t; x < xe; x++) {
                total += err[(b * H + y) * W + x] + floor_px;
            }
        }
        let goal = new_in[at + 2u] * total;
        var run = 0.0;
        var found = (ye - 1u) * W + (xe - 1u);
        var done = false;
        for (var y = y0t; y < ye && !done; y++) {
            for (var x = x0t; x < xe; x++) {
                run += err[(b * H + y) * W + x] + floor_px;
                if (run > goal) {
                    found = y * W + x;
                    done = true;
                    break;
                }
            }
        }
        picked = found;
    }
    let pix = workgroupUniformLoad(&picked);
    let ix = i32(pix % W);
    let iy = i32(pix / W);
    let ccx = f32(ix) + new_in[at + 3u];
    let ccy = f32(iy) + new_in[at + 4u];
    let r_px = new_in[at + 5u];
    let ang0 = new_in[at + 6u];
    let shaped = new_in[at + 11u] != 0.0;
    let base = b * H * W;
    let u = rgb_at(true, base + pix) - rgb_at(false, base + pix);
    let norm = length(u);
    let unit = u / max(norm, 1e-30);

    // the patch: a Gaussian window of sigma sw, read every `step` px inside [ix - h, ix + h]
    let sw = max(r_px * sqrt(VAR_PER_R2), 0.75);
    let h = i32(ceil(3.0 * sw));
    let step = max(1, h / MAX_SAMPLES_PER_SIDE);
    let x0 = max(ix - h, 0);
    let y0 = max(iy - h, 0);
    let nx = (min(ix + h + 1, i32(W)) - x0 + step - 1) / step;
    let ny = (min(iy + h + 1, i32(H)) - y0 + step - 1) / step;
    let inv = 1.0 / (2.0 * sw * sw);
    var acc: array<f32, 9>;
    for (var k = 0; k < 9; k++) {
        acc[k] = 0.0;
    }
    if (shaped && norm >= 1e-6) {
        for (var k = i32(li); k < nx * ny; k += i32(PLACE_THREADS)) {
            let xs = x0 + (k % nx) * step;
            let ys = y0 + (k / nx) * step;
            let p = base + u32(ys) * W + u32(xs);
            let t = rgb_at(true, p);
            let proj = max(dot(t - rgb_at(false, p), unit), 0.0);
            let dx = f32(xs) + 0.5 - ccx;
            let dy = f32(ys) + 0.5 - ccy;
            let w = proj * proj * exp(-dx * dx * inv) * exp(-dy * dy * inv);
            acc[0] += w;
            acc[1] += w * dx;
            acc[2] += w * dy;
            acc[3] += w * dx * dx;
            acc[4] += w * dy * dy;
            acc[5] += w * dx * dy;
            acc[6] += w * t.x;
            acc[7] += w * t.y;
            acc[8] += w * t.z;
        }
    }
    sums[li] = acc;
    workgroupBarrier();
    for (var s = PLACE_THREADS / 2u; s > 0u; s = s >> 1u) {
        if (li < s) {
            for (var k = 0; k < 9; k++) {
                sums[li][k] = sums[li][k] + sums[li + s][k];
            }
        }
        workgroupBarrier();
    }
    if (li != 0u) {
        return;
    }
    let out = wid.x * PLACE_OUT;
    let tot = sums[0][0];
    if (shaped && norm >= 1e-6 && tot > 1e-12) {
        let ox = sums[0][1] / tot;
        let oy = sums[0][2] / tot;
        let a = sums[0][3] / tot - ox * ox + MIN_VAR_PX;
        let c = sums[0][4] / tot - oy * oy + MIN_VAR_PX;
        let bxy = sums[0][5] / tot - ox * oy;
        // eigenvalues (small, large) of [[a, b], [b, c]] and the large one's axis
        let m = 0.5 * (a + c);
        let d = sqrt(0.25 * (a - c) * (a - c) + bxy * bxy);
        let lam_s = m - d;
        let lam_l = m + d;
        var ax_l = vec2f(1.0, 0.0);
        if (abs(bxy) > 1e-12 * max(abs(a), abs(c))) {
            ax_l = normalize(vec2f(lam_l - c, bxy));
        } else if (c > a) {
            ax_l = vec2f(0.0, 1.0);
        }
        let ax_s = vec2f(-ax_l.y, ax_l.x);
        let rho_s = sqrt(max(lam_s, MIN_VAR_PX) / VAR_PER_R2);
        let rho_l = sqrt(max(lam_l, MIN_VAR_PX) / VAR_PER_R2);
        let centre = vec2f(ccx + ox, ccy + oy);
        for (var k = 0u; k < 3u; k++) {
            let ang = ang0 + f32(k) * TWO_PI_3;
            let p = centre + cos(ang) * rho_s * ax_s + sin(ang) * rho_l * ax_l;
            new_out[out + 2u * k] = p.x / f32(W);
            new_out[out + 2u * k + 1u] = p.y / f32(H);
        }
        new_out[out + 6u] = sums[0][6] / tot;
        new_out[out + 7u] = sums[0][7] / tot;
        new_out[out + 8u] = sums[0][8] / tot;
        new_out[out + 9u] = sqrt(rho_s * rho_l);
        new_out[out + 10u] = 1.0;
    } else {
        // the random rule: corners on a circle of radius r_px, each angle jittered
        for (var k = 0u; k < 3u; k++) {
            let ang = ang0 + f32(k) * TWO_PI_3 + new_in[at + 7u + k];
            new_out[out + 2u * k] = ccx / f32(W) + cos(ang) * r_px / f32(W);
            new_out[out + 2u * k + 1u] = ccy / f32(H) + sin(ang) * r_px / f32(H);
        }
        let t = rgb_at(true, base + pix);
        new_out[out + 6u] = t.x;
        new_out[out + 7u] = t.y;
        new_out[out + 8u] = t.z;
        new_out[out + 9u] = r_px;
        new_out[out + 10u] = 0.0;
    }
    new_out[out + 11u] = f32(pix);
}

fn logit(v: f32) -> f32 {
    let c = clamp(v, LOGIT_EPS, 1.0 - LOGIT_EPS);
    return log(c / (1.0 - c));
}

@compute @workgroup_size(64)
fn placed_rows(@builtin(global_invocation_id) gid: vec3u) {
    let n = place.n_new;
    let i = gid.x;
    if (i >= n) {
        return;
    }
    // rank among the image's rows: larger first, ties in placement order (a stable sort); rows
    // are grouped by image, so the image's first row is the count of rows of earlier images
    let b = bitcast<u32>(new_in[i * PLACE_IN]);
    let size = new_out[i * PLACE_OUT + 9u];
    var first = 0u;
    var rank = 0u;
    for (var j = 0u; j < n; j++) {
        let bj = bitcast<u32>(new_in[j * PLACE_IN]);
        if (bj < b) {
            first += 1u;
        } else if (bj == b) {
            let sj = new_out[j * PLACE_OUT + 9u];
            if (sj > size || (sj == size && j < i)) {
                rank += 1u;
            }
        }
    }
    let at = (first + rank) * FRESH_ROW;
    let src = i * PLACE_OUT;
    for (var k = 0u; k < 6u; k++) {
        rows[at + k] = new_out[src + k];
        rows[at + 10u + k] = new_out[src + k];
    }
    for (var k = 6u; k < 9u; k++) {
        let raw = logit(new_out[src + k]);
        rows[at + k] = raw;
        rows[at + 10u + k] = sigmoid(raw);
    }
    rows[at + 9u] = place.alpha_raw;
    rows[at + 19u] = sigmoid(place.alpha_raw);
}
