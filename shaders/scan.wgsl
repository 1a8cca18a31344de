// Workgroup exclusive prefix sum of one count per thread, for the order-preserving compaction of
// the binning kernels and the render-only kernel's own binning: a Hillis-Steele scan in workgroup memory, two barriers a step. The including kernel
// sets SCAN_THREADS (its threads). Call from uniform control flow; a later call may follow once
// every thread has passed a barrier after this one.

var<workgroup> scan: array<u32, SCAN_THREADS>;

// (the counts of the threads before li, the total over the workgroup), to every thread.
fn exclusive_scan(li: u32, mine: u32) -> vec2u {
    scan[li] = mine;
    workgroupBarrier();
    for (var off = 1u; off < SCAN_THREADS; off = off * 2u) {
        var add = 0u;
        if (li >= off) { add = scan[li - off]; }
        workgroupBarrier();
        scan[li] = scan[li] + add;
        workgroupBarrier();
    }
    return vec2u(scan[li] - mine, scan[SCAN_THREADS - 1u]);
}
