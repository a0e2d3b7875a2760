// Direct convolution (ONNX Conv, NCHW): one workgroup computes a tile of
// TW x TH output pixels for COT output channels of one group and one image.
// src/kernels/conv.c declares around this file:
//   defines   TW, TH (the tile: TW * TH = WG_SIZE, one pixel per
//             invocation), COT (output channels per workgroup, 1, 4, 8 or
//             16), COT4 = ceil(COT / 4), CIT (input channels staged per
//             step), KW, KH (the kernel), SW, SH (strides), DW, DH
//             (dilations), PW, PH (the input patch a tile reads:
//             (TW - 1) * SW + (KW - 1) * DW + 1, and H's alike)
//   uniforms  IW, IH (input size), OW, OH (output size), CG (input
//             channels of a group), COG (output channels of a group),
//             COTILES (blocks of COT in a group), TILES_X (tiles along W),
//             PAD_L, PAD_T (the begin pads)
//   shared    float xs[CIT * PH * PW] (a step's input patch, zeros where
//             it lies in the padding), vec4 ws[CIT * KH * KW * COT4] (the
//             step's weights, four output channels to a vec4)
//   after it  the hooks generated from the graph: conv_x (the input at
//             (ix, iy, ci, n), inside the image), conv_w (the weight at
//             (kx, ky, ci, co)), conv_store (the output at (ox, oy, co, n)
//             with the bias and the fused epilogue: batch norm, activation,
//             residual add).
//
// Per step CIT input channels of the patch and their weights are staged in
// shared memory by all invocations, then each invocation multiplies its own
// pixel's window for the COT channels, four at a time (one vec4 of weights,
// the same address for the whole workgroup, per multiply-add of four). The
// image borders and the group's last channels are handled while staging
// (zeros), so the arithmetic loop has no branches.
float conv_x(uint ix, uint iy, uint ci, uint n);
float conv_w(uint kx, uint ky, uint ci, uint co);
void conv_store(uint ox, uint oy, uint co, uint n, float v);

void conv_main() {
    uint lid = gl_LocalInvocationIndex;
    uint tile = gl_WorkGroupID.x;
    uint tx0 = (tile % TILES_X) * TW, ty0 = (tile / TILES_X) * TH;
    uint grp = gl_WorkGroupID.y / COTILES;
    uint col = (gl_WorkGroupID.y % COTILES) * COT; // first channel in the group
    uint co0 = grp * COG + col;
    uint ci0 = grp * CG;
    uint n = gl_WorkGroupID.z;
    uint lx = lid % TW, ly = lid / TW;
    int ix0 = int(tx0 * SW) - int(PAD_L), iy0 = int(ty0 * SH) - int(PAD_T);
    vec4 acc[COT4];
    for (uint q = 0u; q < COT4; q++) acc[q] = vec4(0.0);
    for (uint cc = 0u; cc < CG; cc += CIT) {
        for (uint i = lid; i < CIT * PH * PW; i += WG_SIZE) {
            uint c = i / (PH * PW), r = i % (PH * PW);
            int iy = iy0 + int(r / PW), ix = ix0 + int(r % PW);
            bool inside = cc + c < CG && iy >= 0 && iy < int(IH) && ix >= 0 && ix < int(IW);
            xs[i] = inside ? conv_x(uint(ix), uint(iy), ci0 + cc + c, n) : 0.0;
        }
        for (uint i = lid; i < CIT * KH * KW * COT4; i += WG_SIZE) {
            uint q = i % COT4, r = i / COT4; // r = (c * KH + ky) * KW + kx
            uint c = r / (KH * KW), k = r % (KH * KW);
            vec4 w = vec4(0.0);
            for (uint j = 0u; j < 4u; j++) {
                uint o = q * 4u + j;
                if (o < COT && col + o < COG && cc + c < CG)
                    w[j] = conv_w(k % KW, k / KW, ci0 + cc + c, co0 + o);
            }
            ws[i] = w;
        }
        barrier();
        for (uint c = 0u; c < CIT; c++) {
            for (uint ky = 0u; ky < KH; ky++) {
                for (uint kx = 0u; kx < KW; kx++) {
                    float xv = xs[(c * PH + ly * SH + ky * DH) * PW + lx * SW + kx * DW];
                    uint wb = ((c * KH + ky) * KW + kx) * COT4;
                    for (uint q = 0u; q < COT4; q++) acc[q] += xv * ws[wb + q];
                }
            }
        }
        barrier();
    }
    uint ox = tx0 + lx, oy = ty0 + ly;
    if (ox >= OW || oy >= OH) return;
    for (uint q = 0u; q < COT4; q++) {
        for (uint j = 0u; j < 4u; j++) {
            uint o = q * 4u + j;
            if (o < COT && col + o < COG) conv_store(ox, oy, co0 + o, n, acc[q][j]);
        }
    }
}
