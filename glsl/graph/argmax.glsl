// Workgroup argmax over one (value, index) pair per invocation: the largest
// value, the smallest index among equal ones (numpy's first maximum). Needs
// `shared float am_v[WG_SIZE]; shared uint am_i[WG_SIZE];` and common/reduce
// (for RED_BARRIER).
uint wg_argmax(float v, uint i) {
    uint lid = gl_LocalInvocationIndex;
    am_v[lid] = v;
    am_i[lid] = i;
    RED_BARRIER();
    for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            float ov = am_v[lid + s];
            uint oi = am_i[lid + s];
            if (ov > am_v[lid] || (ov == am_v[lid] && oi < am_i[lid])) {
                am_v[lid] = ov;
                am_i[lid] = oi;
            }
        }
        RED_BARRIER();
    }
    uint r = am_i[0];
    RED_BARRIER();
    return r;
}
