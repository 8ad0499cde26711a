// Device-side copies of the layer device (Device.Write and Device.Copy with
// work queued before them), written in the shared dialect of 01_prelude.
// dst[i] = src[i] for i < n; grid (ceil(n / QP_TG), 1). The ranges must not
// overlap (the host copies overlapping ranges itself).

struct CopyF32 {
    QP_GLOBAL float* dst;
    QP_GLOBAL const float* src;
    uint n;
    uint pad;
};
QP_STATIC_ASSERT(sizeof(CopyF32) == 24, "CopyF32 layout");

QP_ENTRY(copy_f32, CopyF32) {
    uint i = QP_GROUP_X * QP_TG + QP_TID;
    if (i < p.n) {
        p.dst[i] = p.src[i];
    }
}
