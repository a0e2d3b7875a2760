// Pooling, max or average, over dimensions 0 and 1 of x [W, H, C, N]: one
// invocation per output element walks its window (ONNX MaxPool and
// AveragePool: strides, dilations, begin pads; the output's size already
// holds the end pads and the ceil mode). src/kernels/pool.c declares
// around this file:
//   defines   POOL_AVG (else max), POOL_INCLUDE_PAD (average: padding
//             positions count in the divisor)
//   uniforms  pl_total (output elements), pl_ow, pl_oh, pl_oc (the output's
//             sizes), pl_iw, pl_ih (the input's), pl_kw, pl_kh (kernel),
//             pl_sw, pl_sh (strides), pl_dw, pl_dh (dilations), pl_pw,
//             pl_ph (begin pads), pl_lw, pl_lh (the padded input's end:
//             size + end pad; a ceil-mode window's overhang past it never
//             counts)
//   hooks     generated from the graph: pool_x (the input with its
//             prologue), pool_store (with the epilogue)
// A window with no input element (only with dilation) gives 0.
float pool_x(uint w, uint h, uint c, uint n);
void pool_store(uint w, uint h, uint c, uint n, float y);

void pool_main(uint gid)
{
    if (gid >= pl_total) {
        return;
    }
    uint ow = gid % pl_ow;
    uint r = gid / pl_ow;
    uint oh = r % pl_oh;
    r /= pl_oh;
    uint oc = r % pl_oc;
    uint on = r / pl_oc;
    int w0 = int(ow * pl_sw) - int(pl_pw);
    int h0 = int(oh * pl_sh) - int(pl_ph);
    float acc = 0.0;
    uint n_in = 0u;
#ifdef POOL_INCLUDE_PAD
    uint n_pad = 0u;
#endif
    for (uint kh = 0u; kh < pl_kh; kh++) {
        int ih = h0 + int(kh * pl_dh);
        bool h_in = ih >= 0 && ih < int(pl_ih);
        for (uint kw = 0u; kw < pl_kw; kw++) {
            int iw = w0 + int(kw * pl_dw);
#ifdef POOL_INCLUDE_PAD
            n_pad += ih < int(pl_lh) && iw < int(pl_lw) ? 1u : 0u;
#endif
            if (!h_in || iw < 0 || iw >= int(pl_iw)) {
                continue;
            }
            float v = pool_x(uint(iw), uint(ih), oc, on);
#ifdef POOL_AVG
            acc += v;
#else
            acc = n_in == 0u ? v : max(acc, v);
#endif
            n_in++;
        }
    }
#ifdef POOL_AVG
#ifdef POOL_INCLUDE_PAD
    float y = n_in == 0u ? 0.0 : acc / float(n_pad);
#else
    float y = n_in == 0u ? 0.0 : acc / float(n_in);
#endif
#else
    float y = acc;
#endif
    pool_store(ow, oh, oc, on, y);
}
