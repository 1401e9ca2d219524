"""GR's dual problem, solved for one instance (:func:`gr_dual`) or a stack of many (:func:`gr_dual_batch`), the same
``θ`` bit for bit either way; :mod:`.flows` holds GR itself."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy  # its submodules load on first use: scipy.optimize costs a second at every CLI start

GR_BOUND = 30.0
GR_NEWTON_TOLERANCE = 1e-12  # sup norm of the projected gradient (flow units) at which Newton stops
GR_NEWTON_ITERATIONS = 100
GR_LINE_SEARCH_STEPS = 60
ARMIJO = 1e-4
LEVENBERG = 1e-12
#: Newton steps no coordinate of which exceeds this are taken whole, without the line search: near the solution
#: the quadratic model holds and Armijo's test accepts the full step (auditing every such step of Layer
#: Verification's b = 3 ablation cell at 5,000 trials: 0 of 312,708 would have been refused; of steps up to 1,
#: 5 of 474,430). Convergence is still judged by the projected gradient alone, so a step taken this way can cost
#: an iteration but never the tolerance; it saves the objective's evaluation (:meth:`_Stack.move`).
FULL_STEP = 0.1
ROW_TILE = 16  # BLAS products see whole tiles of rows (:func:`_product`): a multiple of 4-, 8- and 16-row blocks


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[m] · b[m]`` for every instance ``m`` (a row-wise sum: the same for an instance in any stack)."""
    return (a * b).sum(axis=1)


def merge_rows(member: np.ndarray, reject: np.ndarray,
               probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tuples with equal rows (``member`` and ``reject``) merged into one, their probabilities added. The dual
    sees a tuple only through its row, and i.i.d. tuples repeat rows (one per order and repetition): 225 rows
    become 120 at V = 15, k = 2, and 3,375 become 575 at k = 3. Rows are sorted on exact binary codes of 52
    columns each, ``reject`` (0 or 1) as bit 52 of the first: codes stay below 2^53."""
    keys = [member[:, i:i + 52] @ 2.0 ** np.arange(min(52, member.shape[1] - i))
            for i in range(0, member.shape[1], 52)]
    keys[0] = keys[0] + reject * 2.0 ** 52
    order = np.lexsort(keys)
    ordered = np.stack(keys)[:, order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (ordered[:, 1:] != ordered[:, :-1]).any(axis=0)
    rows = order[first]
    return member[rows], reject[rows], np.bincount(np.cumsum(first) - 1, weights=probs[order])


def _solve(system: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``system[m]⁻¹ target[m]`` per instance and whether it is finite (a singular system gives ``False``)."""
    try:
        out = np.linalg.solve(system, target[:, :, None])[:, :, 0]
    except np.linalg.LinAlgError:
        out = np.full_like(target, np.nan)
        for m in range(len(system)):
            try:
                out[m] = np.linalg.solve(system[m: m + 1], target[m: m + 1, :, None])[0, :, 0]
            except np.linalg.LinAlgError:
                pass
    return out, np.isfinite(out).all(axis=1)


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for a stack ``a`` ``[M, ·]``, by BLAS's matrix product, with ``M`` padded by zero rows to a multiple of
    :data:`ROW_TILE`. BLAS computes the result in tiles of rows and sums an entry over the shared axis in an order
    that depends on the tile a row falls in: rows of a partial tile at the end (and a single row, which takes the
    vector path) are summed otherwise, so without the padding an instance's sums, hence its ``θ``, would depend on
    the size of its stack (seen with OpenBLAS: a stack of 300 against one of 600). With every tile full, each row
    gets the same sequential sum wherever it stands (a test solves instances in stacks of many sizes)."""
    pad = -len(a) % ROW_TILE
    if pad:
        a = np.concatenate([a, np.zeros((pad, a.shape[1]), dtype=a.dtype)])
    out = a @ b
    return out[: len(out) - pad] if pad else out


@dataclass(frozen=True)
class Rows:
    """The tuple rows shared by every instance of a stack: ``member`` ``[R, F]`` (0/1, a row's tokens) and
    ``pairs`` ``[F·F, R]``, sparse: entry ``(a·F + b, r)`` is 1 where row ``r`` holds both tokens ``a ≠ b`` (one row a
    pair when ``k = 2``). Sums over a row's tokens and over the rows holding a token are BLAS products with
    ``member`` (the instance axis is the long one); sums over the rows holding a pair are sparse products, since
    a pair lies in few rows."""

    member: np.ndarray
    pairs: scipy.sparse.csr_matrix
    #: every row holds at most two tokens (``k = 2``): a pair of tokens lies in one row at most, the row of
    #: exactly those two
    two_token: bool = False

    @classmethod
    def of(cls, member: np.ndarray) -> "Rows":
        """From the 0/1 matrix ``member`` ``[R, F]``."""
        count, size = member.shape
        held = member > 0
        both = held.T[:, None, :] & held.T[None, :, :] & ~np.eye(size, dtype=bool)[:, :, None]
        pair, row = np.nonzero(both.reshape(size * size, count))  # by pair, then by row: CSR's order
        pairs = scipy.sparse.csr_matrix((np.ones(len(pair)), (pair, row)), shape=(size * size, count))
        return cls(np.ascontiguousarray(member, dtype=float), pairs, bool(held.sum(axis=1).max(initial=0) <= 2))

    def row_sums(self, x: np.ndarray) -> np.ndarray:
        """``member @ x[m]`` per instance: ``[M, F]`` → ``[M, R]``."""
        return _product(x, self.member.T)

    def token_sums(self, y: np.ndarray) -> np.ndarray:
        """``memberᵀ @ y[m]`` per instance: ``[M, R]`` → ``[M, F]``."""
        return _product(y, self.member)

    def pair_sums(self, y: np.ndarray) -> np.ndarray:
        """``Σ_{r ∋ a, b} y[m, r]`` per instance and pair ``a ≠ b`` (0 on the diagonal): ``[M, R]`` → ``[M, F, F]``.
        Each entry is summed over the pair's rows in increasing order, from 0, one instance at a time (scipy's
        sparse-by-dense product runs over a CSR row's entries in order, the instances side by side), so an
        instance's sums do not depend on its stack; 3-4x faster than gathering each pair's rows (k = 3)."""
        size = self.member.shape[1]
        return (self.pairs @ y.T).T.reshape(len(y), size, size)


def routed_sums(rows: Rows, x: np.ndarray, reject: np.ndarray, inner: np.ndarray, constant: float) -> np.ndarray:
    """Per instance and row, ``constant`` (rows with a reject option) plus the sum of ``x`` over the tokens the
    row routes to."""
    return np.where(reject, constant + rows.row_sums(x), rows.row_sums(np.where(inner, 0.0, x)))


def routed_flow(rows: Rows, share: np.ndarray, weights: np.ndarray, reject: np.ndarray,
                inner: np.ndarray) -> np.ndarray:
    """Expected flow per token, ``e^θ_a Σ_{r routes to a} probs_r/Z_r``, from ``share = probs/Z`` ``[M, R]``: an
    inner token takes flow from the rows with a reject option, an outside token from the rows holding it."""
    inside = rows.token_sums(np.where(reject, share, 0.0))
    return weights * np.where(inner, inside, rows.token_sums(share))


class _Stack:
    """The instances still iterating, sliced together. A row with a reject option holds inner tokens only, and
    routes to all its tokens; a row without routes to its outside tokens only (GR's structure)."""

    def __init__(self, rows: Rows, probs, reject, inner, q, upper, fixed, theta) -> None:
        self.rows = rows
        self.probs, self.reject, self.inner, self.q, self.upper, self.fixed = probs, reject, inner, q, upper, fixed
        self.set_theta(theta)

    def set_theta(self, theta: np.ndarray) -> None:
        self.theta = theta
        self.weights = np.exp(theta)
        self.z = routed_sums(self.rows, self.weights, self.reject, self.inner, 1.0)

    def keep(self, rows: np.ndarray) -> None:
        """Keep instances ``rows`` (sorted indices) only."""
        if len(rows) == len(self.q):
            return
        for name in ("probs", "reject", "inner", "q", "upper", "fixed", "theta", "weights", "z"):
            setattr(self, name, getattr(self, name)[rows])

    def flow(self) -> np.ndarray:
        """Expected flow per token: the gradient plus ``q``."""
        return routed_flow(self.rows, self.probs / self.z, self.weights, self.reject, self.inner)

    def hessian(self) -> np.ndarray:
        """The Hessian without its diagonal flow term: ``−Σ_r probs_r v_r v_rᵀ/Z_r²`` (``v_r`` = ``e^θ`` on the tokens
        row ``r`` routes to). Two tokens share a row that routes to both only if both are inner (a row with a
        reject option) or both outside; the second kind needs two outside tokens, which most instances lack. With
        two tokens a row (``k = 2``) the one row holding a pair routes to both exactly when the two are on the same
        side of ``H*``: one gather (the same sums: each pair's one term)."""
        curve = -self.probs / self.z / self.z
        inside = np.where(self.reject, curve, 0.0)
        out = ~self.inner
        if self.rows.two_token:
            hess = self.rows.pair_sums(curve)
            hess = np.where(self.inner[:, :, None] == self.inner[:, None, :], hess, 0.0)
        else:
            hess = self.rows.pair_sums(inside)
            several = np.flatnonzero(out.sum(axis=1) > 1)
            if len(several):
                both = out[several][:, :, None] & out[several][:, None, :]
                hess[several] += both * self.rows.pair_sums(curve[several] - inside[several])
        diagonal = np.arange(hess.shape[1])
        hess[:, diagonal, diagonal] = np.where(self.inner, self.rows.token_sums(inside),
                                               self.rows.token_sums(curve - inside))
        hess *= self.weights[:, :, None]
        hess *= self.weights[:, None, :]
        return hess

    def move(self, rows: np.ndarray, alpha: np.ndarray,
             direction: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For instances ``rows``: the point ``alpha`` along the projected arc, the step to it, and the
        objective's change — evaluated directly (``expm1``, ``log1p``), not as a difference of two sums of size
        ``log Z``, so that the line search still resolves it near the tolerance."""
        every = len(rows) == len(self.q)  # the usual case: no copies
        theta, weights, upper, reject, inner, probs, z, q = (
            getattr(self, name) if every else getattr(self, name)[rows]
            for name in ("theta", "weights", "upper", "reject", "inner", "probs", "z", "q"))
        trial = np.minimum(np.maximum(theta + alpha[:, None] * direction, -GR_BOUND), upper)
        step = trial - theta
        dz = routed_sums(self.rows, weights * np.expm1(step), reject, inner, 0.0)
        change = _dot(probs, np.log1p(dz / z)) - _dot(q, step)
        return trial, step, change


def projected_newton(rows: Rows, probs: np.ndarray, reject: np.ndarray, inner: np.ndarray, q: np.ndarray,
                     upper: np.ndarray, fixed: np.ndarray,
                     theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``argmin Σ_r probs_r log Z_r(θ) − q·θ`` over ``−GR_BOUND ≤ θ ≤ upper`` for each instance (``Z_r`` as
    :class:`_Stack` routes row ``r``), from ``theta``; coordinates marked ``fixed`` stay where they start.
    Returns ``θ`` ``[M, F]``, whether each instance's projected gradient reached :data:`GR_NEWTON_TOLERANCE`
    within the iteration cap, and the expected flow per token at the returned ``θ`` (:func:`routed_flow`, as the
    convergence test computed it; undefined where the instance did not converge).

    Bertsekas' projected Newton. Coordinates within ``ε`` of a bound whose gradient points outwards take a
    gradient step, the others a Newton step on the analytic Hessian plus a relative Levenberg term: the
    Hessian is singular along some directions (a constant added to all outside ``θ``; ``θ`` running off
    towards a bound). A free coordinate at a bound that the Newton step pushes outwards is pinned and the step
    solved again. A step within :data:`FULL_STEP` of the current point is taken whole; a longer one is
    searched: Armijo backtracking follows the projected arc, trying the first breakpoint before halving, and a
    full step that beats its quadratic model (an exponential tail) is doubled while that pays.
    """
    count, size = q.shape
    theta_out, flow_out = theta.copy(), np.zeros_like(q)
    converged = np.zeros(count, dtype=bool)
    ids = np.arange(count)
    s = _Stack(rows, probs, reject, inner, q, upper, fixed, theta)
    diagonal = np.arange(size)
    for _ in range(GR_NEWTON_ITERATIONS):
        flow = s.flow()
        grad = flow - s.q
        moved = np.minimum(np.maximum(s.theta - grad, -GR_BOUND), s.upper) - s.theta
        gap = np.where(s.fixed, 0.0, np.abs(moved)).max(axis=1)
        done = gap <= GR_NEWTON_TOLERANCE
        theta_out[ids[done]], flow_out[ids[done]], converged[ids[done]] = s.theta[done], flow[done], True
        go = np.flatnonzero(~done)
        if len(go) == 0:
            break
        ids, flow, grad, gap = ids[go], flow[go], grad[go], gap[go]
        s.keep(go)
        hess = s.hessian()
        hess[:, diagonal, diagonal] += flow * (1 + LEVENBERG)
        band = np.minimum(1e-3, gap)[:, None]
        near_lower, near_upper = s.theta <= -GR_BOUND + band, s.theta >= s.upper - band
        pinned = s.fixed | (near_lower & (grad > 0)) | (near_upper & (grad < 0))
        target = np.where(s.fixed, 0.0, -grad)
        direction = np.zeros_like(target)
        usable = np.ones(len(ids), dtype=bool)
        solving = np.arange(len(ids))
        while len(solving):
            free = ~pinned[solving]
            system = hess if len(solving) == len(ids) else hess[solving]  # masked in place: pins only grow
            system *= free[:, :, None]
            system *= free[:, None, :]
            system[:, diagonal, diagonal] += pinned[solving]
            step, finite = _solve(system, target[solving])
            usable[solving[~finite]] = False
            step = np.where(finite[:, None], step, 0.0)
            direction[solving] = step
            out = free & ((near_lower[solving] & (step < 0)) | (near_upper[solving] & (step > 0)))
            again = out.any(axis=1) & finite
            pinned[solving[again]] |= out[again]
            target[solving[again]] = np.where(out[again], 0.0, target[solving[again]])
            solving = solving[again]
        alpha = np.ones(len(ids))
        trial, change, descent = np.empty_like(s.theta), np.zeros(len(ids)), np.zeros(len(ids))
        short = usable & (np.abs(direction).max(axis=1) <= FULL_STEP)  # Newton's full step, untested
        if short.any():
            trial[short] = np.minimum(np.maximum(s.theta[short] + direction[short], -GR_BOUND), s.upper[short])
        searching = np.flatnonzero(usable & ~short)
        for _ in range(GR_LINE_SEARCH_STEPS):
            if len(searching) == 0:
                break
            point, step, delta = s.move(searching, alpha[searching], direction[searching])
            slope = _dot(grad[searching], step)
            ok = delta <= ARMIJO * slope
            at = searching[ok]
            trial[at], change[at], descent[at] = point[ok], delta[ok], slope[ok]
            searching = searching[~ok]
            first_try = alpha[searching] == 1.0
            if first_try.any():
                rows = searching[first_try]
                d = direction[rows]
                with np.errstate(divide="ignore", invalid="ignore"):
                    reach = (np.where(d > 0, s.upper[rows], -GR_BOUND) - s.theta[rows]) / d
                reach = np.where(~pinned[rows] & (reach > 0), reach, np.inf)
                first = np.minimum(reach.min(axis=1), 1.0)
                alpha[rows] = np.where(first < 1, first, 0.5)
            alpha[searching[~first_try]] /= 2
        usable[searching] = False
        longer = np.flatnonzero(usable & ~short & (alpha == 1.0) & (change < 0.6 * descent))
        while len(longer):
            point, _, delta = s.move(longer, 2 * alpha[longer], direction[longer])
            better = delta < change[longer]
            at = longer[better]
            trial[at], change[at], alpha[at] = point[better], delta[better], 2 * alpha[at]
            longer = at[alpha[at] < 64]
        keep = np.flatnonzero(usable)
        ids = ids[keep]
        s.keep(keep)
        s.set_theta(trial[keep])
        if len(ids) == 0:
            break
    return theta_out, converged, flow_out


def _lbfgsb_dual(probs: np.ndarray, member: np.ndarray, reject: np.ndarray, q: np.ndarray,
                 upper: np.ndarray) -> np.ndarray:
    """One instance's dual by scipy's L-BFGS-B from ``θ = 0``: the fallback should Newton stop short."""
    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        weights = np.exp(theta)
        z = reject + member @ weights
        value = float(probs @ np.log(z) - q @ theta)
        grad = (member * weights).T @ (probs / z) - q
        return value, grad

    bounds = [(-GR_BOUND, float(u)) for u in upper]
    result = scipy.optimize.minimize(objective, np.zeros(len(q)), jac=True, method="L-BFGS-B", bounds=bounds,
                                     options={"gtol": 1e-13, "ftol": 1e-15, "maxiter": 20000})
    return result.x


def _first_guess(rows: Rows, probs: np.ndarray, reject: np.ndarray, inner: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Where Newton starts: for an inner token ``a``, the ``θ_a`` that would saturate it if the other tokens of its
    rows had no weight, ``e^θ_a = q_a/(M_a − q_a)`` with ``M_a`` the mass of the rows with a reject option
    holding ``a``; 0 where that has no solution and for outside tokens. A token that must take nearly all of
    its rows' mass needs a large ``θ``, which Newton in ``θ`` would reach about one unit per iteration."""
    mass = rows.token_sums(np.where(reject, probs, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        guess = np.log(q) - np.log(mass - q)
    return np.where(inner & (mass > q) & (q > 0), np.clip(guess, -GR_BOUND, GR_BOUND), 0.0)


def gr_dual_batch(rows: Rows, probs: np.ndarray, reject: np.ndarray, q: np.ndarray,
                  inner: np.ndarray, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """GR's ``θ`` ``[M, V]`` and the expected flow per token at it, ``e^θ_a Σ_{r routes to a} probs_r/Z_r``
    (:func:`routed_flow`), for a stack of instances on shared tuple rows: ``probs`` ``[M, R]`` (0 allowed),
    ``reject`` ``[M, R]`` (the row lies in ``H*``), capacities ``q`` ``[M, V]``, ``inner`` ``[M, V]`` (``H*``). A row
    with a reject option routes to all its tokens, a row without to its outside tokens only.

    ``θ ≤ 0`` off ``inner`` (the dual of "flow ≤ q" with no reject option). Coordinates the objective is
    monotone in are put at their bound: undrafted tokens (term ``−q_y θ_y``) and drafted ones with ``q_y ≤ 0``
    (gradient = flow − q > 0). :func:`projected_newton` solves for the others from ``start`` where it is given
    and finite (clipped to the bounds; a warm start, :class:`simulator.verifiers.batched.gr_stacks.MassGrid`),
    elsewhere from :func:`_first_guess`; rows inside ``H*`` touch only inner tokens and the others only outside
    ones, so its Hessian is block diagonal. An instance Newton stops short on is solved again by L-BFGS-B. The
    flow is the one Newton's convergence test computed (recomputed for an instance L-BFGS-B solved): the same
    numbers as evaluating it afresh at the returned ``θ``.

    Every instance runs its own iterations (converged instances stop, the others go on) and every operation on an
    instance reads only that instance's slice — its sums over rows and tokens are BLAS matrix products with the
    shared 0/1 row matrix, on stacks padded to whole tiles of rows (:func:`_product`) — so an instance's ``θ`` does
    not depend on the stack: the reference path solves one instance at a time (:func:`gr_dual`), Layer
    Verification's batched Monte Carlo path (:mod:`simulator.verifiers.batched.gr_stacks`) thousands.
    """
    reject = reject.astype(bool)
    upper = np.where(inner, GR_BOUND, 0.0)
    drafted = rows.token_sums((probs > 0).astype(float)) > 0
    free = drafted & (q > 0)
    guess = _first_guess(rows, probs, reject, inner, q)
    if start is not None:
        guess = np.where(np.isfinite(start), np.minimum(np.maximum(start, -GR_BOUND), upper), guess)
    start = np.where(free, guess, np.where(q > 0, upper, np.where(drafted | (q < 0), -GR_BOUND, 0.0)))
    theta, converged, flow = projected_newton(rows, probs, reject, inner, q, upper, ~free, start)
    for m in np.flatnonzero(~converged):
        routed = rows.member * (reject[m][:, None] | ~inner[m][None, :])
        theta[m] = np.where(free[m], _lbfgsb_dual(probs[m], routed, reject[m].astype(float), q[m], upper[m]),
                            start[m])
        at = slice(m, m + 1)
        flow[m] = _Stack(rows, probs[at], reject[at], inner[at], q[at], upper[at], ~free[at], theta[at]).flow()[0]
    return theta, flow


def theta_slope(rows: Rows, probs: np.ndarray, reject: np.ndarray, q: np.ndarray, inner: np.ndarray,
                theta: np.ndarray) -> np.ndarray:
    """``dθ/ds`` at ``s = 1`` of the solution ``θ(s)`` for capacities ``s·q`` (the rows and ``H*`` held fixed), per
    instance, at a solution ``theta`` of :func:`gr_dual_batch`: where the flow meets the capacities,
    ``J dθ = q ds`` with ``J`` the flow's Jacobian (the Hessian Newton uses), solved on the coordinates strictly
    inside their bounds; 0 on the others (at a bound, held there) and for an instance whose system is singular.
    A first-order guess of ``θ`` at nearby capacities: nothing here decides an outcome."""
    reject = reject.astype(bool)
    upper = np.where(inner, GR_BOUND, 0.0)
    drafted = rows.token_sums((probs > 0).astype(float)) > 0
    free = drafted & (q > 0) & (theta > -GR_BOUND) & (theta < upper)
    s = _Stack(rows, probs, reject, inner, q, upper, ~free, theta)
    system = s.hessian()
    diagonal = np.arange(system.shape[1])
    system[:, diagonal, diagonal] += s.flow() * (1 + LEVENBERG)
    system *= free[:, :, None]
    system *= free[:, None, :]
    system[:, diagonal, diagonal] += ~free
    with np.errstate(all="ignore"):
        slope, finite = _solve(system, np.where(free, q, 0.0))
    return np.where(free & finite[:, None], slope, 0.0)


def gr_dual(probs: np.ndarray, member: np.ndarray, reject: np.ndarray, q: np.ndarray,
            inner: np.ndarray) -> np.ndarray:
    """GR's ``θ`` for one instance, one row per tuple (``member`` 0/1, ``reject`` 1 for a row inside ``H*``), on
    its rows merged (:func:`merge_rows`).

    ``θ`` minimises ``Σ_r probs_r log(reject_r + member_r·e^θ) − q·θ`` over ``−GR_BOUND ≤ θ ≤ upper``, one row ``r``
    per candidate tuple; an instance's ``θ`` is the same bit for bit alone or in any stack (the tests check it).
    """
    member, reject, probs = merge_rows(member, reject, probs)
    return gr_dual_batch(Rows.of(member), probs[None], reject[None], q[None], inner[None])[0][0]
