// Helpers of the reduction, norm and softmax kernels.

const float NEG_INF = uintBitsToFloat(0xff800000u);
