// The Gated DeltaNet decode path: causal conv step, gates, recurrence.

struct Conv {
    ulong u_off;      // float32 [tokens][channels]: the pre-conv inputs
    ulong win_off;    // float32 [kernel_size-1][channels]: the previous inputs, oldest first (updated)
    ulong w_off;      // float32 [channels][kernel_size]: j = kernel_size-1 multiplies the current input
    ulong out_off;    // float32 [tokens][channels]
    uint channels;
    uint kernel_size;
    uint tokens;
    uint pad;
};

// Depthwise causal conv1d with state, then SiLU. One thread per channel runs
// the tokens in order, so the window of a channel is only touched by one
// thread.
kernel void conv1d_step(device const uchar* ub [[buffer(0)]],
                        device uchar* winb [[buffer(1)]],
                        device const uchar* wb [[buffer(2)]],
                        device uchar* ob [[buffer(3)]],
                        constant Conv& p [[buffer(4)]],
                        uint3 gid [[thread_position_in_grid]]) {
    uint ch = gid.x;
    if (ch >= p.channels) {
        return;
    }
    ulong C = p.channels;
    uint K = p.kernel_size;
    device const float* u = (device const float*)(ub + p.u_off);
    device float* win = (device float*)(winb + p.win_off);
    device const float* w = (device const float*)(wb + p.w_off) + ulong(ch) * K;
    device float* out = (device float*)(ob + p.out_off);
    for (uint t = 0; t < p.tokens; t++) {
        float ut = u[t * C + ch];
        float acc = w[K - 1] * ut;
        for (uint j = 0; j + 1 < K; j++) {
            acc += w[j] * win[j * C + ch];
        }
        out[t * C + ch] = qp_silu(acc);
        for (uint j = 0; j + 2 < K; j++) {
            win[j * C + ch] = win[(j + 1) * C + ch];
        }
        if (K > 1) {
            win[(K - 2) * C + ch] = ut;
        }
    }
}

struct Gates {
    ulong b_off;      // float32 [tokens][n]
    ulong a_off;      // float32 [tokens][n]
    ulong nega_off;   // float32 [n]: -exp(A_log)
    ulong dtb_off;    // float32 [n]: dt_bias
    ulong beta_off;   // float32 [tokens][n] out
    ulong g_off;      // float32 [tokens][n] out: log decay
    uint n;
    uint tokens;
};

// beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias).
kernel void gdn_gates(device const uchar* bb [[buffer(0)]],
                      device const uchar* ab [[buffer(1)]],
                      device const uchar* nab [[buffer(2)]],
                      device const uchar* dtb [[buffer(3)]],
                      device uchar* betab [[buffer(4)]],
                      device uchar* gb [[buffer(5)]],
                      constant Gates& p [[buffer(6)]],
                      uint3 gid [[thread_position_in_grid]]) {
    uint i = gid.x;
    uint t = gid.y;
    if (i >= p.n || t >= p.tokens) {
        return;
    }
    ulong k = ulong(t) * p.n + i;
    float b = ((device const float*)(bb + p.b_off))[k];
    float a = ((device const float*)(ab + p.a_off))[k];
    float na = ((device const float*)(nab + p.nega_off))[i];
    float dt = ((device const float*)(dtb + p.dtb_off))[i];
    ((device float*)(betab + p.beta_off))[k] = qp_sigmoid(b);
    ((device float*)(gb + p.g_off))[k] = na * qp_softplus(a + dt);
}

struct Delta {
    ulong s_off;      // float32 [nv][dk][dv] state (updated)
    ulong q_off;      // float32 [tokens][nk*dk], normalized and scaled
    ulong k_off;      // float32 [tokens][nk*dk], normalized
    ulong v_off;      // float32 [tokens][nv*dv]
    ulong beta_off;   // float32 [tokens][nv]
    ulong g_off;      // float32 [tokens][nv]: log decay
    ulong o_off;      // float32 [tokens][nv*dv]
    uint nv;
    uint nk;          // value head h uses key head h / (nv / nk)
    uint dk;
    uint dv;
    uint tokens;
    uint pad;
};

// The gated delta rule, per value head h and token:
//   S = exp(g) S;  m = S^T k;  delta = beta (v - m);  S += k (x) delta;  o = S^T q
// Column j of S only ever meets element j of m, delta, v and o, so one thread
// owns one column (j, h) and runs the tokens in order: no reductions, no
// barriers. Grid: (dv, nv) threads.
kernel void gated_delta_step(device uchar* Sb [[buffer(0)]],
                             device const uchar* qb [[buffer(1)]],
                             device const uchar* kb [[buffer(2)]],
                             device const uchar* vb [[buffer(3)]],
                             device const uchar* betab [[buffer(4)]],
                             device const uchar* gb [[buffer(5)]],
                             device uchar* ob [[buffer(6)]],
                             constant Delta& p [[buffer(7)]],
                             uint3 gid [[thread_position_in_grid]]) {
    uint j = gid.x;
    uint h = gid.y;
    if (j >= p.dv || h >= p.nv) {
        return;
    }
    uint kh = h / (p.nv / p.nk);
    ulong dv = p.dv;
    device float* S = (device float*)(Sb + p.s_off) + ulong(h) * p.dk * dv + j;
    for (uint t = 0; t < p.tokens; t++) {
        ulong qk = ulong(t) * p.nk * p.dk + ulong(kh) * p.dk;
        device const float* q = (device const float*)(qb + p.q_off) + qk;
        device const float* k = (device const float*)(kb + p.k_off) + qk;
        ulong vo = ulong(t) * p.nv * dv + ulong(h) * dv + j;
        ulong go = ulong(t) * p.nv + h;
        float vj = ((device const float*)(vb + p.v_off))[vo];
        float beta = ((device const float*)(betab + p.beta_off))[go];
        float decay = exp(((device const float*)(gb + p.g_off))[go]);
        float m = 0.0f;
        for (uint i = 0; i < p.dk; i++) {
            float s = S[i * dv] * decay;
            S[i * dv] = s;
            m += s * k[i];
        }
        float delta = beta * (vj - m);
        float o = 0.0f;
        for (uint i = 0; i < p.dk; i++) {
            float s = S[i * dv] + k[i] * delta;
            S[i * dv] = s;
            o += s * q[i];
        }
        ((device float*)(ob + p.o_off))[vo] = o;
    }
}
