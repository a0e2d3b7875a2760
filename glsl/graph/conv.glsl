// Direct convolution (ONNX Conv, NCHW): one workgroup computes a tile of
// output pixels for COT output channels of one group and one image.
// src/kernels/conv.c declares around this file:
//   defines   COT (output channels per workgroup: 1, 4, 8 or 16), COT4 =
//             ceil(COT / 4), WLANES (output channels a weight word holds:
//             1 when COT is 1, else 4), WTYPE (float or vec4), CIT (input
//             channels a step stages), KW, KH (the kernel), SW, SH
//             (strides), DW, DH (dilations); and either CONV_1X1 (a 1x1
//             kernel: the tile is WG_SIZE consecutive output pixels, one
//             per invocation, each reading its own input pixel, since no
//             neighbour shares it) or the patch tile: TW, TH (TW * TH =
//             WG_SIZE invocations), PPI (output rows per invocation: the
//             tile is TW x TH * PPI pixels), PW, PH (the input patch the
//             tile reads: (TW - 1) * SW + (KW - 1) * DW + 1 wide and
//             (TH * PPI - 1) * SH + (KH - 1) * DH + 1 high)
//   uniforms  IW, IH (input size), OW, OH (output size), CG (input
//             channels of a group), COG (output channels of a group),
//             COTILES (blocks of COT in a group), TILES_X (tiles along W),
//             PAD_L, PAD_T (the begin pads)
//   shared    float xs[CIT * PH * PW] (patch tile only: a step's input
//             patch, zeros where it lies in the padding), WTYPE
//             ws[CIT * KH * KW * COT4] (the step's weights, WLANES output
//             channels to a word)
//   after it  the hooks generated from the graph: conv_x (the input at
//             (ix, iy, ci, n), inside the image), conv_w (the weight at
//             (kx, ky, ci, co)), conv_store (the output at (ox, oy, co, n)
//             with the bias and the fused epilogue: batch norm, activation,
//             residual add).
//
// Per step, CIT input channels' weights for the COT channels (and, for the
// patch tile, the input patch) are staged in shared memory by all
// invocations; then each invocation multiplies its pixels' windows for the
// COT channels, WLANES at a time (one word of weights, the same address
// across the workgroup, per multiply-add). Image borders and the group's
// last channels are handled while staging (zeros), so the arithmetic loop
// has no branches.
float conv_x(uint ix, uint iy, uint ci, uint n);
float conv_w(uint kx, uint ky, uint ci, uint co);
void conv_store(uint ox, uint oy, uint co, uint n, float v);

#if WLANES == 1
#define WSET(w, j, v) w = (v)
#define WGET(w, j) (w)
#else
#define WSET(w, j, v) w[j] = (v)
#define WGET(w, j) (w)[j]
#endif
#ifdef CONV_1X1
#define PPI 1u
#endif

// Stages the weights of input channels cc .. cc + CIT - 1 of the group for
// output channels col .. col + COT - 1 (zeros past the group's ends).
void conv_stage_w(uint lid, uint cc, uint ci0, uint col, uint co0) {
    for (uint i = lid; i < CIT * KH * KW * COT4; i += WG_SIZE) {
        uint q = i % COT4, r = i / COT4; // r = (c * KH + ky) * KW + kx
        uint c = r / (KH * KW), k = r % (KH * KW);
        WTYPE w = WTYPE(0.0);
        for (uint j = 0u; j < WLANES; j++) {
            uint o = q * WLANES + j;
            if (o < COT && col + o < COG && cc + c < CG)
                WSET(w, j, conv_w(k % KW, k / KW, ci0 + cc + c, co0 + o));
        }
        ws[i] = w;
    }
}

void conv_main() {
    uint lid = gl_LocalInvocationIndex;
    uint tile = gl_WorkGroupID.x;
    uint grp = gl_WorkGroupID.y / COTILES;
    uint col = (gl_WorkGroupID.y % COTILES) * COT; // first channel in the group
    uint co0 = grp * COG + col;
    uint ci0 = grp * CG;
    uint n = gl_WorkGroupID.z;
    WTYPE acc[PPI * COT4];
    for (uint q = 0u; q < PPI * COT4; q++) acc[q] = WTYPE(0.0);
#ifdef CONV_1X1
    uint p = tile * WG_SIZE + lid;
    uint ox = p % OW, oy = p / OW;
    int ix = int(ox * SW) - int(PAD_L), iy = int(oy * SH) - int(PAD_T);
    bool inside = oy < OH && ix >= 0 && ix < int(IW) && iy >= 0 && iy < int(IH);
    for (uint cc = 0u; cc < CG; cc += CIT) {
        conv_stage_w(lid, cc, ci0, col, co0);
        barrier();
        uint cn = min(CIT, CG - cc);
        if (inside) {
            for (uint c = 0u; c < cn; c++) {
                float xv = conv_x(uint(ix), uint(iy), ci0 + cc + c, n);
                for (uint q = 0u; q < COT4; q++) acc[q] += xv * ws[c * COT4 + q];
            }
        }
        barrier();
    }
    if (oy >= OH) return;
#else
    uint tx0 = (tile % TILES_X) * TW, ty0 = (tile / TILES_X) * TH * PPI;
    uint lx = lid % TW, ly = lid / TW;
    int ix0 = int(tx0 * SW) - int(PAD_L), iy0 = int(ty0 * SH) - int(PAD_T);
    for (uint cc = 0u; cc < CG; cc += CIT) {
        for (uint i = lid; i < CIT * PH * PW; i += WG_SIZE) {
            uint c = i / (PH * PW), r = i % (PH * PW);
            int iy = iy0 + int(r / PW), ix = ix0 + int(r % PW);
            bool inside = cc + c < CG && iy >= 0 && iy < int(IH) && ix >= 0 && ix < int(IW);
            xs[i] = inside ? conv_x(uint(ix), uint(iy), ci0 + cc + c, n) : 0.0;
        }
        conv_stage_w(lid, cc, ci0, col, co0);
        barrier();
        for (uint c = 0u; c < CIT; c++) {
            for (uint ky = 0u; ky < KH; ky++) {
                for (uint kx = 0u; kx < KW; kx++) {
                    uint wb = ((c * KH + ky) * KW + kx) * COT4;
                    for (uint r = 0u; r < PPI; r++) {
                        uint row = (ly + r * TH) * SH + ky * DH;
                        float xv = xs[(c * PH + row) * PW + lx * SW + kx * DW];
                        for (uint q = 0u; q < COT4; q++) acc[r * COT4 + q] += xv * ws[wb + q];
                    }
                }
            }
        }
        barrier();
    }
    uint ox = tx0 + lx;
    if (ox >= OW) return;
#endif
    for (uint r = 0u; r < PPI; r++) {
#ifndef CONV_1X1
        uint oy = ty0 + ly + r * TH;
        if (oy >= OH) break;
#endif
        for (uint q = 0u; q < COT4; q++) {
            for (uint j = 0u; j < WLANES; j++) {
                uint o = q * WLANES + j;
                if (o < COT && col + o < COG)
                    conv_store(ox, oy, co0 + o, n, WGET(acc[r * COT4 + q], j));
            }
        }
    }
}
