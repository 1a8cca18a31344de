// Order-preserving compaction for the binning kernels and the render-only kernel's own binning: a
// round of up to 256 candidates (bit k of a 256-bit mask in workgroup memory: candidate k of the
// round hits), each thread's first position the count of set bits before its own. One barrier a
// round, where a prefix sum over the threads took two a step (2 log2(threads) + 1): three masks
// take turns, so a mask is cleared a round after it was last read and a barrier before it is set
// again. Call from uniform control flow; clear_rounds and a barrier before round 0.

var<workgroup> round_bits: array<array<atomic<u32>, 8>, 3>;
var<workgroup> running: u32;  // the length of the list a binning workgroup made (for `listed`)

// Masks 0 and 1 to zero, before round 0 (round r clears the mask of round r + 2).
fn clear_rounds(li: u32) {
    if (li < 16u) { atomicStore(&round_bits[li / 8u][li % 8u], 0u); }
}

// Round r: this thread's hits `bits` are candidates first, first + 1, ... of the round (bit q is
// candidate first + q; they must not cross a multiple of 32). Returns (the hits before `first`,
// the round's hits), to every thread.
fn round_prefix(li: u32, r: u32, first: u32, bits: u32) -> vec2u {
    let m = r % 3u;
    let w = first / 32u;
    if (bits != 0u) { atomicOr(&round_bits[m][w], bits << (first % 32u)); }
    workgroupBarrier();  // every hit set; every thread is done reading round r - 1's mask
    if (li < 8u) { atomicStore(&round_bits[(r + 2u) % 3u][li], 0u); }
    var before = countOneBits(atomicLoad(&round_bits[m][w]) & ((1u << (first % 32u)) - 1u));
    var total = 0u;
    for (var j = 0u; j < 8u; j++) {
        let c = countOneBits(atomicLoad(&round_bits[m][j]));
        total += c;
        if (j < w) { before += c; }
    }
    return vec2u(before, total);
}

// Word w of round r's mask, until round r + 1's barrier.
fn round_word(r: u32, w: u32) -> u32 {
    return atomicLoad(&round_bits[r % 3u][w]);
}

// The length of the list this workgroup just made, to every thread, its entries (written to
// storage by any thread of the workgroup) visible to all: what a forward that bins its own tile
// walks.
fn listed() -> u32 {
    storageBarrier();
    return workgroupUniformLoad(&running);
}
