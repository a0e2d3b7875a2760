// Elementwise functions of the op table whose GLSL built-ins are missing or
// not safe over the whole float range.

// tanh: the built-in may overflow exp() to inf/inf = NaN for large |x| on
// some drivers; clamping is exact to float precision beyond |x| = 10.
float op_tanh(float x) {
    return tanh(clamp(x, -10.0, 10.0));
}

float op_sigmoid(float x) {
    return 1.0 / (1.0 + exp(-x));
}

float op_silu(float x) {
    return x / (1.0 + exp(-x));
}

// GELU, tanh approximation (as ggml's gelu): 0.5x(1 + tanh(u)) with
// u = sqrt(2/pi)(x + 0.044715x^3), written as x*sigmoid(2u), which has no
// cancellation for negative x (1 + tanh(u) loses every digit there).
float op_gelu(float x) {
    float u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(clamp(-2.0 * u, -80.0, 80.0)));
}

// erfc with fractional error below 1.2e-7 everywhere (Numerical Recipes'
// erfcc, a Chebyshev fit); GLSL ES has no erf. Relative accuracy in the
// tail is what keeps gelu_erf(x) accurate for negative x.
float op_erfc(float x) {
    float z = abs(x);
    float t = 1.0 / (1.0 + 0.5 * z);
    float r = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
              t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
              t * (-0.82215223 + t * 0.17087277)))))))));
    return x >= 0.0 ? r : 2.0 - r;
}

// 0.5x(1 + erf(x/sqrt 2)) = 0.5x*erfc(-x/sqrt 2)
float op_gelu_erf(float x) {
    return 0.5 * x * op_erfc(-x * 0.7071067811865476);
}

// log(1 + e^x) without overflow for large x.
float op_softplus(float x) {
    float y = exp(-abs(x));
    // log(1 + y) rounds to 0 for tiny y; its series keeps the digits
    return max(x, 0.0) + (y < 1e-4 ? y * (1.0 - 0.5 * y) : log(1.0 + y));
}

float op_step(float x) {
    return x > 0.0 ? 1.0 : 0.0;
}

// GLSL's pow is undefined for a negative base; C's powf gives a real result
// when the exponent is an integer.
float op_pow(float a, float b) {
    if (a >= 0.0) return pow(a, b);
    if (b == floor(b)) {
        float r = pow(-a, b);
        return mod(b, 2.0) == 0.0 ? r : -r;
    }
    return uintBitsToFloat(0x7fc00000u); // NaN, as powf
}
