// Partial rotary embedding and attention over the KV cache.

struct Rope {
    ulong x_off;      // float32 [tokens][...]: head h of token t at t*row_stride + h*head_stride
    ulong cos_off;    // float32 [tokens][half_dim]: cosine of each pair's angle
    ulong sin_off;    // float32 [tokens][half_dim]: sine
    uint tokens;
    uint heads;
    uint row_stride;
    uint head_stride;
    uint half_dim;    // rotary dims / 2
    uint pad;
};

// NeoX half rotation over the first 2*half_dim dims of each head, in place:
// pair (i, i + half_dim) -> (a*c - b*s, b*c + a*s). Dims past the rotary part
// are not touched. Grid: (half_dim, heads, tokens) threads.
kernel void rope_neox(device uchar* xb [[buffer(0)]],
                      device const uchar* cb [[buffer(1)]],
                      device const uchar* sb [[buffer(2)]],
                      constant Rope& p [[buffer(3)]],
                      uint3 gid [[thread_position_in_grid]]) {
    if (gid.x >= p.half_dim || gid.y >= p.heads || gid.z >= p.tokens) {
        return;
    }
    device float* x = (device float*)(xb + p.x_off) + ulong(gid.z) * p.row_stride + ulong(gid.y) * p.head_stride;
    ulong ti = ulong(gid.z) * p.half_dim + gid.x;
    float c = ((device const float*)(cb + p.cos_off))[ti];
    float s = ((device const float*)(sb + p.sin_off))[ti];
    float a = x[gid.x];
    float b = x[gid.x + p.half_dim];
    x[gid.x] = a * c - b * s;
    x[gid.x + p.half_dim] = b * c + a * s;
}

struct Attn {
    ulong q_off;       // float32: head h of token t at t*q_tok_stride + h*q_stride
    ulong k_off;       // float32 [keys][kv_stride]: kv head g at g*head_dim
    ulong v_off;       // same layout as k
    ulong o_off;       // float32: head h of token t at t*o_tok_stride + h*head_dim
    ulong s_off;       // float32 scratch [tokens][heads][keys]
    uint tokens;       // queries (the last tokens of the sequence)
    uint heads;
    uint kv_heads;     // heads / kv_heads query heads share one kv head
    uint head_dim;     // <= QP_MAX_HEAD_DIM
    uint keys;         // keys in the cache; query t sees keys - (tokens-1-t)
    uint q_stride;
    uint q_tok_stride;
    uint kv_stride;
    uint o_tok_stride;
    uint pad;
    float scale;       // usually head_dim^-1/2
    float pad2;
};

// Causal attention with grouped KV heads: one threadgroup per (head, token).
// Scores and their softmax are float32; the scores go through device scratch
// so any number of keys works.
kernel void attn_decode(device const uchar* qb [[buffer(0)]],
                        device const uchar* kb [[buffer(1)]],
                        device const uchar* vb [[buffer(2)]],
                        device uchar* ob [[buffer(3)]],
                        device uchar* sb [[buffer(4)]],
                        constant Attn& p [[buffer(5)]],
                        uint3 tgid [[threadgroup_position_in_grid]],
                        uint tid [[thread_index_in_threadgroup]],
                        uint sg [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]]) {
    uint h = tgid.x;
    uint t = tgid.y;
    uint g = h / (p.heads / p.kv_heads);
    uint n = p.keys - (p.tokens - 1 - t);
    threadgroup float qs[QP_MAX_HEAD_DIM];
    threadgroup float part[QP_SIMDS];
    device const float* q = (device const float*)(qb + p.q_off) + ulong(t) * p.q_tok_stride + ulong(h) * p.q_stride;
    for (uint i = tid; i < p.head_dim; i += QP_TG) {
        qs[i] = q[i];
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    device const float* K = (device const float*)(kb + p.k_off) + ulong(g) * p.head_dim;
    device const float* V = (device const float*)(vb + p.v_off) + ulong(g) * p.head_dim;
    device float* s = (device float*)(sb + p.s_off) + (ulong(t) * p.heads + h) * p.keys;

    float mx = -INFINITY;
    for (uint j = tid; j < n; j += QP_TG) {
        device const float* kj = K + ulong(j) * p.kv_stride;
        float d = 0.0f;
        for (uint i = 0; i < p.head_dim; i++) {
            d += qs[i] * kj[i];
        }
        d *= p.scale;
        s[j] = d;
        mx = max(mx, d);
    }
    mx = simd_max(mx);
    if (lane == 0) {
        part[sg] = mx;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    mx = part[0];
    for (uint i = 1; i < QP_SIMDS; i++) {
        mx = max(mx, part[i]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float sum = 0.0f;
    for (uint j = tid; j < n; j += QP_TG) {
        float e = exp(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    sum = simd_sum(sum);
    if (lane == 0) {
        part[sg] = sum;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup | mem_flags::mem_device);
    sum = 0.0f;
    for (uint i = 0; i < QP_SIMDS; i++) {
        sum += part[i];
    }
    float inv = 1.0f / sum;

    device float* o = (device float*)(ob + p.o_off) + ulong(t) * p.o_tok_stride + ulong(h) * p.head_dim;
    for (uint i = tid; i < p.head_dim; i += QP_TG) {
        float acc = 0.0f;
        for (uint j = 0; j < n; j++) {
            acc += s[j] * V[ulong(j) * p.kv_stride + i];
        }
        o[i] = acc * inv;
    }
}
