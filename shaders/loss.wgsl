// Loss: one thread per pixel. Writes dL/dC (the per-pixel seed of the backward pass) and one
// partial loss sum per tile (fixed-order tree reduction, so the result is reproducible).
// Dispatch: (tiles_x, tiles_y, batch).

@group(0) @binding(0) var<uniform> frame: Frame;
@group(0) @binding(1) var<storage, read> image: array<f32>;
@group(0) @binding(2) var<storage, read> target_img: array<f32>;
@group(0) @binding(3) var<storage, read_write> dldc: array<f32>;
@group(0) @binding(4) var<storage, read_write> loss_partial: array<f32>;

var<workgroup> red: array<f32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) li: u32) {
    let b = wid.z;
    let slot = b * frame.n_tiles + wid.y * frame.tiles_x + wid.x;
    let pix = tile_pixel(wid.xy, li);
    var contrib = 0.0;
    if (pix.x < frame.width && pix.y < frame.height) {
        let o = ((b * frame.height + pix.y) * frame.width + pix.x) * 3u;
        for (var c = 0u; c < 3u; c++) {
            let diff = image[o + c] - target_img[o + c];
            if (frame.loss_kind == 0u) {
                contrib += diff * diff;
                dldc[o + c] = 2.0 * diff * frame.inv_values;
            } else {
                contrib += abs(diff);
                dldc[o + c] = sign(diff) * frame.inv_values;
            }
        }
    }
    red[li] = contrib;
    workgroupBarrier();
    for (var off = WG / 2u; off > 0u; off = off / 2u) {
        if (li < off) { red[li] += red[li + off]; }
        workgroupBarrier();
    }
    if (li == 0u) { loss_partial[slot] = red[0]; }
}
