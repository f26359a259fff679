"""symbolic.*: exact sympy proofs of the PaTH and MDN identities, proving the code that runs.

Every identity check (``symbolic.<family>.<identity>``) builds both sides with symbols at small sizes
(references/symbolic) and passes only when their difference reduces to exactly zero (no floating point
anywhere in the proof).  The fast forms under proof (references/path_forms.py, references/mdn_forms.py) are
the functions the float64 references and the same-dtype implementation run, called with an exact binding of
their operations context: the proof proves that code, not a copy of it.

Where float64 code is a different code path from the algebra (the literal walk, the explicit Householder
products, the float64 token recurrence, the spectra and the second-order rule of references/spectra.py),
the check also evaluates the proved expression exactly at random dyadic-rational points and compares that
code at the same points: a normwise relative difference above TIE = 1e-12 fails the check.
Every negative control (``...negative...``) passes only when sympy shows the printed-but-wrong form differs
from the truth; its message gives a concrete rational point and the exact nonzero value there.

The proofs are cached per process (the sympy constructions are shared between a check and its negative).
"""
from __future__ import annotations

import random
from fractions import Fraction

import sympy as sp
import torch

from pathmdn_verify.references import mdn_oracle as MDN
from pathmdn_verify.references import path_oracle as PA
from pathmdn_verify.references import spectra as SP
from pathmdn_verify.references.symbolic import first_nonzero
from pathmdn_verify.references.symbolic import mdn_proofs as SM
from pathmdn_verify.references.symbolic import path_proofs as SPATH
from pathmdn_verify.core.registry import Context, Result, check

TIE = 1e-12        # float64 reference vs the exact value of the proved expression (normwise relative)
DT = torch.float64


# ----------------------------------------------------------------------------------------------------
# helpers: random exact points, exact -> float64, comparisons


def _rng(ctx: Context, salt: str) -> random.Random:
    return random.Random(f"{ctx.seed}:{salt}")


def _dy(rng: random.Random, lo: float, hi: float, den: int = 64) -> sp.Rational:
    """a dyadic rational in [lo, hi] (exactly representable in float64)."""
    return sp.Rational(rng.randint(int(round(lo * den)), int(round(hi * den))), den)


def _t(M) -> torch.Tensor:
    """sympy Matrix / nested list of rationals -> float64 tensor."""
    if isinstance(M, sp.MatrixBase):
        return torch.tensor([[float(M[i, j]) for j in range(M.cols)] for i in range(M.rows)], dtype=DT)
    return torch.tensor([[float(x) for x in row] for row in M], dtype=DT)


def _vec(M) -> torch.Tensor:
    return _t(M).reshape(-1)


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    x, ref = x.to(DT).reshape(ref.shape), ref.to(DT)
    num = float(torch.linalg.vector_norm(x - ref))
    den = float(torch.linalg.vector_norm(ref))
    if not torch.isfinite(x).all():
        return float("inf")
    return num / den if den > 0 else num


class _Tie:
    """Collects float64-reference-vs-exact comparisons; the worst one decides."""

    def __init__(self):
        self.worst, self.where, self.count, self.names = 0.0, "", 0, []

    def add(self, name: str, ref: torch.Tensor, exact: torch.Tensor) -> None:
        e = _rel(ref, exact)
        self.count += 1
        if name not in self.names:
            self.names.append(name)
        if not self.where or not (e <= self.worst):
            self.worst, self.where = e, name

    def fail(self, name: str) -> None:
        """a property of the reference that must hold did not."""
        self.names.append(name + " (VIOLATED)")
        self.worst, self.where = float("inf"), name

    def ok(self) -> bool:
        return self.worst <= TIE

    def text(self) -> str:
        return (f"tied to code: {', '.join(self.names)} at random rational points ({self.count} comparisons), "
                f"worst normwise relative difference {self.worst:.1e} ({self.where}) "
                f"{'<=' if self.ok() else 'EXCEEDS'} {TIE:.0e}")


def _lower(A: torch.Tensor) -> torch.Tensor:
    """lower triangle (the causal logits), zero above (references put -inf there)."""
    return torch.where(torch.ones_like(A, dtype=torch.bool).tril(), A, torch.zeros_like(A))


def _plain(msg: str) -> str:
    """The console renders messages as rich markup, where "[word ...]" is a style tag and vanishes: write
    matrix brackets as parentheses (the formulas read the same)."""
    return msg.replace("[", "(").replace("]", ")")


def _identity(check_id: str, description: str, prove, runs=(), tie=None):
    """Register an identity check: prove() -> list of Proofs (all must hold); runs: the code functions the
    proofs execute; tie(proofs, ctx) -> _Tie for float64 code that the proofs do not execute."""
    def run(ctx: Context) -> Result:
        proofs = prove()
        for pr in proofs:
            if not pr.holds:
                nz = first_nonzero(pr.difference)
                return Result("fail", message=f"NOT PROVED ({pr.name}, sizes {pr.sizes}): the difference does not "
                                              f"reduce to 0; entry {nz[:2]} = {nz[2]}")
        sizes = "; ".join(", ".join(f"{k}={v}" for k, v in pr.sizes.items()) for pr in proofs)
        msg = f"proved exactly ({sizes}): {proofs[0].statement} (hypothesis: {proofs[0].hypothesis})"
        if runs:
            msg += f"; the proof runs the code itself: {', '.join(runs)} (exact binding)"
        details = {"sizes": [dict(pr.sizes) for pr in proofs], "runs": list(runs)}
        if tie is not None:
            t = tie(proofs, ctx)
            details.update(tie_worst=t.worst, tie_where=t.where, tie_comparisons=t.count)
            msg += "; " + t.text()
            if not t.ok():
                return Result("fail", message=_plain("proof holds but the reference code DISAGREES with it: " + msg),
                              details=details)
        return Result("pass", None, None, _plain(msg), details)
    check(check_id, description)(run)


def _negative(check_id: str, description: str, prove):
    def run(ctx: Context) -> Result:
        pr = prove()
        if pr.holds:
            return Result("fail", message=f"NOT REJECTED: the wrong form equals the truth exactly ({pr.statement})")
        if not pr.refuted:
            return Result("fail", message=f"difference is nonzero symbolically but no rational witness was found "
                                          f"({pr.statement})")
        pt, (i, j), val = pr.witness
        return Result("pass", None, None, _plain(f"rejected ({', '.join(f'{k}={v}' for k, v in pr.sizes.items())}): "
                                                 f"{pr.statement}; {pr.witness_text()}"),
                      {"witness_value": str(val), "witness_entry": [i, j],
                       "witness_point": {str(k): str(v) for k, v in pt.items()}})
    check(check_id, description)(run)


# ----------------------------------------------------------------------------------------------------
# PaTH


def _path_point(S, rng, beta=(1 / 64, 2)) -> dict:
    pt = {}
    for x in list(S.W) + list(S.Q) + list(S.K):
        pt[x] = _dy(rng, -1, 1)
    for x in S.beta:
        pt[x] = _dy(rng, *beta)
    return pt


def _path_tensors(S, pt):
    W = torch.tensor([[float(pt[S.W[i, j]]) for j in range(S.d)] for i in range(S.L)], dtype=DT)
    Q = torch.tensor([[float(pt[S.Q[i, j]]) for j in range(S.d)] for i in range(S.L)], dtype=DT)
    K = torch.tensor([[float(pt[S.K[i, j]]) for j in range(S.d)] for i in range(S.L)], dtype=DT)
    b = torch.tensor([float(pt[x]) for x in S.beta], dtype=DT)
    return Q, K, W, b


def _points(ctx):
    return ctx.pick(2, 4, 10)


UT_SIZES = [(4, 3), (2, 3), (3, 2)]


def _tie_householder(proofs, ctx):
    """householder_product (explicit products, an oracle: not the proved UT code) vs the proved products."""
    t, pr = _Tie(), proofs[0]
    S = SPATH.symbols(pr.sizes["L"], pr.sizes["d"])
    rng = _rng(ctx, "ut")
    for _ in range(_points(ctx)):
        pt = _path_point(S, rng)
        _, _, W, b = _path_tensors(S, pt)
        for order in ("forward", "reverse"):
            t.add("householder_product", PA.householder_product(W, b, order), _t(pr.evaluate(order, pt)))
    return t


_identity("symbolic.path.ut_orientation",
          "UT transform: H_L...H_1 = I - W^T U W and H_1...H_L = I - W^T U^T W (exact, any w)",
          lambda: [SPATH.ut_orientation(L, d) for L, d in UT_SIZES], ("path_forms.ut_product", "path_forms.ut_factor"),
          _tie_householder)
_negative("symbolic.path.ut_orientation.negative",
          "rejects the printed orientation H_1...H_L = I - W^T U W",
          lambda: SPATH.ut_orientation_negative(4, 3))


def _tie_walk(proofs, ctx):
    """path_logits (the literal walk, an oracle: not the proved UT code) vs the proved logits."""
    t, pr = _Tie(), proofs[0]
    S = SPATH.symbols(pr.sizes["L"], pr.sizes["d"])
    rng = _rng(ctx, "logits")
    for _ in range(_points(ctx)):
        pt = _path_point(S, rng)
        Q, K, W, b = _path_tensors(S, pt)
        t.add("path_logits", _lower(PA.path_logits(Q, K, W, b)), _t(pr.evaluate("logits", pt)))
    return t


_identity("symbolic.path.causal_logits",
          "all causal logits: lower(QK^T) - lower(QW^T) U strictLower(WK^T) = k_j^T H_(j+1)...H_i q_i",
          lambda: [SPATH.causal_logits(4, 3), SPATH.causal_logits(3, 2)], ("path_forms.block_transform",),
          _tie_walk)
_identity("symbolic.path.block_transform",
          "boundary-adjusted blocks: Qbar, Kbar and F_b = I - W^T U^T W equal their Householder products",
          lambda: [SPATH.block_transform(4, 3), SPATH.block_transform(3, 2)], ("path_forms.block_transform",))
_negative("symbolic.path.block_transform.negative",
          "rejects the paper's block product without 'I -' (F_b = W^T U^T W)",
          lambda: SPATH.block_transform_negative(3, 2))
_identity("symbolic.path.cross_block",
          "cross-block factorization Kbar_j^T F_(c+1)...F_(b-1) Qbar_i and the scan's read-then-cross order",
          lambda: [SPATH.cross_block(3, 3, 2)], ("path_forms.block_transform", "path_forms.scan"))
_negative("symbolic.path.cross_block.negative",
          "rejects a scan that crosses a block's transition before reading it",
          lambda: SPATH.cross_block_negative(2, 3, 2))
_identity("symbolic.path.decode_keys",
          "decoding: after the in-place key updates k_j^T q_t equals the path logit",
          lambda: [SPATH.decode_keys(4, 2), SPATH.decode_keys(5, 3)], ("path_forms.decode_keys",))

_PYTHAGOREAN = [(1, 2, 2, 3), (2, 3, 6, 7), (1, 4, 8, 9), (2, 6, 9, 11), (4, 4, 7, 9), (2, 10, 11, 15)]


def _unit3(rng):
    """an exactly rational unit vector in R^3 (a Pythagorean quadruple, random signs and order)."""
    a, b, c, n = rng.choice(_PYTHAGOREAN)
    xs = [sp.Rational(x * rng.choice((-1, 1)), n) for x in (a, b, c)]
    rng.shuffle(xs)
    return xs


def _tie_reflection(proofs, ctx):
    t, pr = _Tie(), proofs[0]
    d = pr.sizes["d"]
    rng = _rng(ctx, "reflection")
    for a in range(d):
        for b in range(a + 1, d):
            w = torch.zeros(d, dtype=DT)
            w[a], w[b] = 2 ** -0.5, -(2 ** -0.5)
            t.add("householder(swap, beta=2)", PA.householder(w, 2.0), _t(pr.evaluate(f"swap_{a}_{b}", {})))
    for _ in range(_points(ctx)):
        wu = _unit3(rng) if d == 3 else None
        bt = _dy(rng, 1 / 64, 2)
        H = PA.householder(torch.tensor([float(x) for x in wu], dtype=DT), float(bt))
        wvec = sp.Matrix(wu)
        t.add("householder(w unit) w = (1 - beta) w", H @ _vec(wvec), _vec((1 - bt) * wvec))
        # H z = z for z orthogonal to w (any w): z = ||w||^2 u - (w.u) w
        wv = [_dy(rng, -1, 1) for _ in range(d)]
        uv = [_dy(rng, -1, 1) for _ in range(d)]
        W_, U_ = sp.Matrix(wv), sp.Matrix(uv)
        z = (W_.T * W_)[0] * U_ - (W_.T * U_)[0] * W_
        H = PA.householder(_vec(W_), float(bt))
        t.add("householder(w) z = z", H @ _vec(z), _vec(z))
    return t


_identity("symbolic.path.reflection",
          "beta = 2, w = (e_a - e_b)/sqrt(2) swaps a and b; H w = (1 - beta) w (||w|| = 1); H z = z for z _|_ w",
          lambda: [SPATH.reflection(3), SPATH.reflection(4)], tie=_tie_reflection)


# ----------------------------------------------------------------------------------------------------
# MDN


def _gates(rng, C):
    """alpha, mu in [1/2, 63/64], beta in [1/64, 1 - alpha], eta in [1/64, 127/64] (the gate constraints)."""
    alpha = [_dy(rng, 0.5, 63 / 64) for _ in range(C)]
    mu = [_dy(rng, 0.5, 63 / 64) for _ in range(C)]
    beta = [_dy(rng, 1 / 64, 1 - float(a)) for a in alpha]
    eta = [_dy(rng, 1 / 64, 127 / 64) for _ in range(C)]
    return {"alpha": alpha, "mu": mu, "beta": beta, "eta": eta}


def _gate_point(g_syms, gv) -> dict:
    return {s: gv[n][r] for n in ("alpha", "mu", "beta", "eta") for r, s in enumerate(g_syms[n])}


def _log(xs) -> torch.Tensor:
    return torch.log(torch.tensor([float(x) for x in xs], dtype=DT))


def _f(xs) -> torch.Tensor:
    return torch.tensor([float(x) for x in xs], dtype=DT)


_identity("symbolic.mdn.coefficients",
          "MDN cumulative coefficients: the code's stable and log forms equal the recurrence's; gamma in product, "
          "sum and c-form agree; b_i = abar_i c_i",
          lambda: [SM.coefficients(4), SM.coefficients(3)], ("mdn_forms.coefficients", "mdn_forms.step"))
_negative("symbolic.mdn.coefficients.negative",
          "rejects b_i = alpha_i c_i (non-cumulative alpha)",
          lambda: SM.coefficients_negative(4))


def _tie_expansion(proofs, ctx):
    t, pr = _Tie(), proofs[0]
    C, dk = pr.sizes["C"], pr.sizes["dk"]
    g = SM.gate_symbols(C)
    x = pr.extra
    rng = _rng(ctx, "expansion")
    for _ in range(_points(ctx)):
        gv = _gates(rng, C)
        pt = _gate_point(g, gv)
        for s in list(x["S0"]) + list(x["M0"]) + [e for kk in x["k"] for e in kk] + [e for vv in x["vt"] for e in vv]:
            pt[s] = _dy(rng, -1, 1)
        k = torch.tensor([[float(pt[e]) for e in kk] for kk in x["k"]], dtype=DT)
        v = torch.tensor([[float(pt[e]) for e in vv] for vv in x["vt"]], dtype=DT)
        S0, M0 = _t(x["S0"].xreplace(pt)), _t(x["M0"].xreplace(pt))
        la, lm, b, eta = _log(gv["alpha"]), _log(gv["mu"]), _f(gv["beta"]), _f(gv["eta"])
        for i in range(1, C + 1):
            # p = 0 makes the reference's residuals equal to v, the "given" v~ of the expansion
            _, S_i, M_i = MDN.recurrence_head(k[:i], k[:i], v[:i], la[:i], lm[:i], b[:i], eta[:i],
                                              p=torch.zeros(i, dk, dtype=DT), scale=1.0, S0=S0, M0=M0)
            t.add("recurrence_head(p=0).S_i", S_i, _t(pr.evaluate(f"S{i}", pt)))
            t.add("recurrence_head(p=0).M_i", M_i, _t(pr.evaluate(f"M{i}", pt)))
    return t


_identity("symbolic.mdn.state_expansion",
          "S_i = abar_i S_0 - b_i M_0 + sum_j gamma_ij k^_j v~_j^T (and M_i) from unrolling the recurrence",
          lambda: [SM.state_expansion(4, 2, 2)], ("mdn_forms.step",), _tie_expansion)


_identity("symbolic.mdn.row_shift",
          "v~_i = v_i - p_i^T S_(i-1) gives the triangular system with Gamma^- (Gamma shifted down one row)",
          lambda: [SM.row_shift(4, 2, 1), SM.row_shift(3, 2, 2)],
          ("mdn_forms.chunk", "mdn_forms.shift_rows", "mdn_forms.coefficients", "mdn_forms.step"))
_negative("symbolic.mdn.row_shift.negative",
          "rejects Gamma with its diagonal deleted in place of the row shift Gamma^-",
          lambda: SM.row_shift_negative(4, 2, 1))
_identity("symbolic.mdn.chunk_output",
          "chunk output O and the U/Y/Z solve reproduce the recurrence (outputs, residuals, carried states)",
          lambda: [SM.chunk_output(3, 2, 2), SM.chunk_output(3, 1, 1), SM.chunk_output(4, 2, 2)],
          ("mdn_forms.chunk", "mdn_forms.shift_rows", "mdn_forms.coefficients", "mdn_forms.step"))


def _tie_spectrum(t: _Tie, ref: torch.Tensor, a, b, m, e, dk: int) -> None:
    """closed_form_spectrum's 2 d_k values against the exact roots alpha, mu, lambda_pm.  Near a double
    root (r^2 ~ 4 alpha mu) the roots are ill-conditioned (float error ~ sqrt(u)), so the pair is compared
    through its sum and product (r and alpha mu, well conditioned) and root by root only when the
    discriminant is not small."""
    r = a + m - a * b * e
    disc = r ** 2 - 4 * a * m
    exact_rest = [complex(a)] * (dk - 1) + [complex(m)] * (dk - 1)
    if dk > 1:
        t.add("closed_form_spectrum (alpha, mu)", torch.view_as_real(ref[:-2]),
              torch.view_as_real(torch.tensor(exact_rest, dtype=torch.complex128)))
    lp, lm = ref[-2], ref[-1]
    t.add("closed_form_spectrum pair: sum = r, product = alpha mu",
          torch.tensor([(lp + lm).real, (lp + lm).imag, (lp * lm).real, (lp * lm).imag], dtype=DT),
          torch.tensor([float(r), 0.0, float(a * m), 0.0], dtype=DT))
    if abs(disc) >= sp.Rational(1, 100) * max(r ** 2, a * m):
        sq = sp.sqrt(disc)
        exact = [complex(sp.N((r + sq) / 2, 30)), complex(sp.N((r - sq) / 2, 30))]
        t.add("closed_form_spectrum pair (roots)", torch.view_as_real(ref[-2:]),
              torch.view_as_real(torch.tensor(exact, dtype=torch.complex128)))


def _tie_transition(proofs, ctx):
    t, pr = _Tie(), proofs[0]
    dk = pr.sizes["dk"]
    alpha, beta, mu, eta, ksym = pr.extra["symbols"]
    x = pr.extra["x"]
    rng = _rng(ctx, "transition")
    for _ in range(_points(ctx)):
        gv = {"alpha": _dy(rng, 0.5, 63 / 64), "mu": _dy(rng, 1 / 64, 63 / 64), "eta": _dy(rng, 1 / 64, 127 / 64)}
        gv["beta"] = _dy(rng, 1 / 64, 1 - float(gv["alpha"]))
        pt = {alpha: gv["alpha"], beta: gv["beta"], mu: gv["mu"], eta: gv["eta"]}
        kv = [_dy(rng, -1, 1) for _ in range(dk)]                      # any key for the matrix
        pt.update({s: val for s, val in zip(ksym, kv)})
        for s in pr.gens:
            pt.setdefault(s, sp.Integer(0))
        A_ref = SP.transition_matrix(float(gv["alpha"]), float(gv["beta"]), float(gv["mu"]), float(gv["eta"]),
                                     _f(kv))
        A_ex = pr.evaluate("A", pt)
        t.add("transition_matrix", A_ref, _t(A_ex))
        # characteristic polynomial of the reference matrix at rational x vs the proved factorisation
        # x >= 3 stays a distance >= 1 from every eigenvalue (real ones are < 2, complex ones have modulus < 1),
        # so the float determinant is well conditioned there
        for xv in (Fraction(3), Fraction(7, 2), Fraction(5)):
            ex = pr.extra["factored"].xreplace({**pt, x: sp.Rational(xv.numerator, xv.denominator)})
            ref = torch.linalg.det(float(xv) * torch.eye(2 * dk, dtype=DT) - A_ref)
            t.add("det(x I - transition_matrix)", ref.reshape(1), torch.tensor([float(ex)], dtype=DT))
        # closed-form spectrum for a unit key: exact roots alpha, mu, lambda_pm of the proved polynomial
        if dk == 3:
            ku = _unit3(rng)
            ref = SP.closed_form_spectrum(float(gv["alpha"]), float(gv["beta"]), float(gv["mu"]), float(gv["eta"]), dk)
            _tie_spectrum(t, ref, gv["alpha"], gv["beta"], gv["mu"], gv["eta"], dk)
            lp, lm = pr.extra["lambda"]
            sub = {alpha: gv["alpha"], beta: gv["beta"], mu: gv["mu"], eta: gv["eta"]}
            exact = [complex(sp.N(v, 30)) for v in
                     [sub[alpha]] * (dk - 1) + [sub[mu]] * (dk - 1) + [lp.xreplace(sub), lm.xreplace(sub)]]
            A_unit = SP.transition_matrix(float(gv["alpha"]), float(gv["beta"]), float(gv["mu"]), float(gv["eta"]),
                                          _f(ku))
            for xv in (Fraction(3), Fraction(9, 2)):
                val = complex(1)
                for e in exact:
                    val *= complex(float(xv)) - e
                ref = torch.linalg.det(float(xv) * torch.eye(2 * dk, dtype=DT) - A_unit)
                t.add("det(x I - transition_matrix(unit k)) = prod (x - closed_form_spectrum)", ref.reshape(1),
                      torch.tensor([val.real], dtype=DT))
    return t


_identity("symbolic.mdn.transition",
          "the (S, M) step is the block transition matrix; charpoly (x-alpha)^(d-1) (x-mu)^(d-1) (x^2 - r x + a mu)",
          lambda: [SM.transition(3, 2), SM.transition(2, 1), SM.transition(4, 1)], ("mdn_forms.step",),
          _tie_transition)


def _tie_second_order(proofs, ctx):
    t, pr = _Tie(), proofs[0]
    x = pr.extra["setup"]
    rng = _rng(ctx, "second")
    for _ in range(_points(ctx)):
        pt = {}
        for pre in ("0", "1"):
            a = _dy(rng, 0.5, 63 / 64)
            pt[x["a" + pre]] = a
            pt[x["b" + pre]] = _dy(rng, 1 / 64, 1 - float(a))
            pt[x["m" + pre]] = _dy(rng, 1 / 64, 63 / 64)
            pt[x["e" + pre]] = _dy(rng, 1 / 64, 127 / 64)
        for s in pr.gens:
            pt.setdefault(s, _dy(rng, -1, 1))
        S_prev, S_prev2, S_t = (_t(pr.evaluate(n, pt)) for n in ("S_prev", "S_prev2", "S_t"))
        ref = SP.second_order_step(S_prev, S_prev2, _vec(x["k"].xreplace(pt)), _vec(x["v"].xreplace(pt)),
                                   float(pt[x["a1"]]), float(pt[x["b1"]]), float(pt[x["m1"]]), float(pt[x["e1"]]),
                                   float(pt[x["a0"]]), float(pt[x["b0"]]))
        t.add("second_order_step", ref, S_t)
    return t


_identity("symbolic.mdn.second_order",
          "eliminating M: S_t = [(alpha_t + beta_t mu_t/beta_(t-1)) I - alpha_t beta_t eta_t k k^T] S_(t-1) - ...",
          lambda: [SM.second_order(2, 2), SM.second_order(3, 1)], ("mdn_forms.step",), _tie_second_order)
_negative("symbolic.mdn.second_order.negative",
          "rejects Table 1's second-order form without alpha_t in the key-dependent term",
          lambda: SM.second_order_negative(2, 2))


def _tie_sufficient(proofs, ctx):
    t, pr = _Tie(), proofs[0]
    alpha, beta, eta, mu = pr.gens
    rng = _rng(ctx, "sufficient")
    worst_re = float("inf")
    for _ in range(_points(ctx) * 5):
        a = _dy(rng, 1 / 64, 63 / 64)
        b = _dy(rng, 1 / 64, 1 - float(a))
        e = _dy(rng, 1 / 64, 127 / 64)
        m = _dy(rng, 9 / 64, 63 / 64)              # mu > 1/8
        sub = {alpha: a, beta: b, eta: e, mu: m}
        if pr.evaluate("r_minus_mu_plus_eighth", sub)[0] < 0:     # cannot happen if the proof is right
            t.fail("r - mu + 1/8 >= 0 (exact)")
        ref = SP.closed_form_spectrum(float(a), float(b), float(m), float(e), 1)
        _tie_spectrum(t, ref, a, b, m, e, 1)
        worst_re = min(worst_re, float(ref.real.min()))
    if not worst_re > 0:
        t.fail("closed_form_spectrum real parts > 0 for mu > 1/8")
    # sharpness: at alpha = 1/4, beta = 3/4, eta -> 2 and mu just below 1/8 the trace is negative
    ref = SP.closed_form_spectrum(0.25, 0.75, 0.125 - 1 / 64, 2 - 2 ** -10, 1)
    if not float(ref.real.min()) < 0:
        t.fail("closed_form_spectrum has Re < 0 just below mu = 1/8 (sharpness)")
    t.names.append(f"min real part over the sampled box {worst_re:.3g} > 0")
    return t


_identity("symbolic.mdn.sufficient_condition",
          "0 < alpha, beta <= 1 - alpha, 0 < eta < 2 imply r >= mu - 1/8 (sharp): mu > 1/8 gives Re(lambda) > 0",
          lambda: [SM.sufficient_condition()], tie=_tie_sufficient)


# ----------------------------------------------------------------------------------------------------
# Gated DeltaNet: MDN without momentum

_identity("symbolic.mdn.gdn_reduction",
          "MDN with mu = 0, p = alpha k is Gated DeltaNet: S_t = alpha_t (I - b_t k k^T) S_(t-1) + b_t k v^T, "
          "b = beta eta",
          lambda: [SM.gdn_reduction(2, 2, 2), SM.gdn_reduction(3, 3, 1)], ("mdn_forms.step",))
for _variant in ("beta_without_eta", "correction_without_alpha"):
    _negative(f"symbolic.mdn.gdn_reduction.negative.{_variant}",
              f"rejects the reduction to {SM.GDN_VARIANTS[_variant]}",
              lambda v=_variant: SM.gdn_reduction_negative(v))
