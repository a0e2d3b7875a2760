// Transposed 2-D convolution (ONNX ConvTranspose): x [W, H, C_in, N],
// weight [kW, kH, C_out / groups, C_in] -> [W', H', C_out, N]. One
// invocation per output element gathers what scatters onto it: output
// position o receives input i through kernel tap k when o + pad = i*stride
// + k*dilation, so per tap the input index is (o + pad - k*dilation) /
// stride where that divides exactly. src/kernels/pool.c declares around
// this file:
//   defines   CT_BIAS (a bias per output channel)
//   uniforms  ct_total (output elements), ct_ow, ct_oh, ct_oc (the output's
//             sizes), ct_iw, ct_ih (the input's), ct_kw, ct_kh (kernel),
//             ct_sw, ct_sh (strides), ct_dw, ct_dh (dilations), ct_pw,
//             ct_ph (begin pads), ct_cog, ct_cig (output and input channels
//             per group)
//   hooks     generated from the graph: ct_x (the input with its prologue),
//             ct_w, ct_b, ct_store (with the epilogue)
float ct_x(uint w, uint h, uint c, uint n);
float ct_w(uint kw, uint kh, uint co, uint ci);
#ifdef CT_BIAS
float ct_b(uint co);
#endif
void ct_store(uint w, uint h, uint c, uint n, float y);

void ct_main(uint gid)
{
    if (gid >= ct_total) {
        return;
    }
    uint ow = gid % ct_ow;
    uint r = gid / ct_ow;
    uint oh = r % ct_oh;
    r /= ct_oh;
    uint oc = r % ct_oc;
    uint on = r / ct_oc;
    uint ci0 = (oc / ct_cog) * ct_cig;
    uint col = oc % ct_cog;
#ifdef CT_BIAS
    float acc = ct_b(oc);
#else
    float acc = 0.0;
#endif
    for (uint kh = 0u; kh < ct_kh; kh++) {
        int th = int(oh + ct_ph) - int(kh * ct_dh);
        if (th < 0 || uint(th) % ct_sh != 0u || uint(th) / ct_sh >= ct_ih) {
            continue;
        }
        uint ih = uint(th) / ct_sh;
        for (uint kw = 0u; kw < ct_kw; kw++) {
            int tw = int(ow + ct_pw) - int(kw * ct_dw);
            if (tw < 0 || uint(tw) % ct_sw != 0u || uint(tw) / ct_sw >= ct_iw) {
                continue;
            }
            uint iw = uint(tw) / ct_sw;
            for (uint j = 0u; j < ct_cig; j++) {
                acc += ct_x(iw, ih, ci0 + j, on) * ct_w(kw, kh, col, ci0 + j);
            }
        }
    }
    ct_store(ow, oh, oc, on, acc);
}
