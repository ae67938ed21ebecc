(** * The KDN covariance leaf's action error along the trajectory (docs/error-model.md, "KDN
    covariances: the trajectory-local bound"; check/kdn_leaf_local.hpp, kdn_leaf_local_action_error)

    Both KDNs' covariance leaves are [[a, ω], [v a, 1 + v ω]] (v the gain parameter: μ‖k‖²/(K r)
    isotropic, μ k²/r diagonal), whose action at x > 0 is the gain map g(v, Y) = Y / (1 + v Y) of
    Y = a x + ω ([leaf_action_gain_map]). A computed leaf has â within A and v̂ within V (the counts
    of IsoLeaf.v and KdnLeaf.v), ĉ = fl(v̂ â) and d̂ = fl(1 + fl(v̂ ω)). Then at every x > 0

        |ln act(â, ω, ĉ, d̂, x) − ln act(a, ω, v a, 1 + v ω, x)| <= ln(s e^V + (1 − s) e^A') + 2η

    with s = vY/(1 + vY) and A' = ln(1 + w(e^A − 1)), w = a x / Y ([kdn_leaf_local_action]): ŷ = â x + ω
    is within A' of Y (AffineLogWeight.v), ĉ x + d̂ within two roundings of 1 + v̂ ŷ
    ([computed_denominator]), and g moves by at most the mixed bound when v and y move within V
    and A' ([gain_map_mixed]: g = 1/(v + 1/y), and v + 1/y = (u + 1/Y)(s e^{±V} + (1 − s) e^{±A'}) at
    the ends; the lower end is covered by the upper one, [mixed_cauchy]). At most max(V, A') + 2η,
    against twice the largest entry count of the entry-wise bound (IsoLeaf.iso_leaf_action). *)

From Coq Require Import Reals Lra.
From KalmanOracle Require Import FloatError Birkhoff KlaStep AffineLogWeight IsoLeaf.
Open Scope R_scope.

Definition gain_map (v y : R) : R := y / (1 + v * y).

Lemma leaf_action_gain_map : forall a omega v x, 0 <= v -> 0 < a * x + omega ->
  act a omega (v * a) (1 + v * omega) x = gain_map v (a * x + omega).
Proof.
  intros a omega v x Hv HY. unfold act, gain_map.
  replace (v * a * x + (1 + v * omega)) with (1 + v * (a * x + omega)) by ring. reflexivity.
Qed.

(** (s p + (1 − s) q)(s / p + (1 − s) / q) >= 1: a weighted mean times the weighted mean of the
    reciprocals (Cauchy–Schwarz). *)
Lemma mixed_cauchy : forall s p q, 0 <= s <= 1 -> 0 < p -> 0 < q ->
  1 <= (s * p + (1 - s) * q) * (s / p + (1 - s) / q).
Proof.
  intros s p q Hs Hp Hq.
  replace ((s * p + (1 - s) * q) * (s / p + (1 - s) / q))
    with (((s * p + (1 - s) * q) * (s * q + (1 - s) * p)) / (p * q)) by (field; lra).
  assert (Hpq : 0 < p * q) by (apply Rmult_lt_0_compat; lra).
  apply (Rmult_le_reg_r (p * q)); [exact Hpq |].
  unfold Rdiv. rewrite Rmult_assoc, Rinv_l by nra. rewrite Rmult_1_l, Rmult_1_r.
  assert (0 <= s * (1 - s)) by (apply Rmult_le_pos; lra).
  assert (0 <= (p - q) * (p - q)) by (pose proof (Rle_0_sqr (p - q)) as Hsq; unfold Rsqr in Hsq; exact Hsq).
  assert (0 <= s * (1 - s) * ((p - q) * (p - q))) by (apply Rmult_le_pos; assumption).
  nra.
Qed.

(** Birkhoff.ln_sandwich's log bound alone. *)
Lemma sandwich_log_bound : forall k x y, 0 < x -> exp (- k) * x <= y <= exp k * x -> Rabs (ln y - ln x) <= k.
Proof. intros k x y Hx H. exact (proj2 (ln_sandwich x y k Hx H)). Qed.

(** A log bound as a sandwich (the converse of Birkhoff.ln_sandwich). *)
Lemma log_bound_sandwich : forall k x y, 0 < x -> 0 < y -> Rabs (ln y - ln x) <= k -> exp (- k) * x <= y <= exp k * x.
Proof.
  intros k x y Hx Hy H. apply abs_le_elim in H.
  rewrite <- (exp_ln x) at 1 2 by exact Hx. rewrite <- (exp_ln y) by exact Hy.
  rewrite <- !exp_plus. split; apply exp_mono; lra.
Qed.

(** The gain map moves by at most the mixed bound when v moves within V and y within A. *)
Theorem gain_map_mixed : forall v Y vh yh V A, 0 <= v -> 0 < Y -> 0 <= V -> 0 <= A ->
  exp (- V) * v <= vh <= exp V * v -> exp (- A) * Y <= yh <= exp A * Y ->
  Rabs (ln (gain_map vh yh) - ln (gain_map v Y))
    <= ln (v * Y / (1 + v * Y) * exp V + (1 - v * Y / (1 + v * Y)) * exp A).
Proof.
  intros v Y vh yh V A Hv HY HV HA [Hv1 Hv2] [Hy1 Hy2].
  set (s := v * Y / (1 + v * Y)).
  assert (HvY : 0 <= v * Y) by nra.
  assert (Hs : 0 <= s <= 1).
  { unfold s. split; [apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra] |].
    apply (Rmult_le_reg_r (1 + v * Y)); [lra |]. unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra. }
  pose proof (exp_pos V) as EV. pose proof (exp_pos (- V)) as EmV.
  pose proof (exp_pos A) as EA. pose proof (exp_pos (- A)) as EmA.
  assert (Hvh : 0 <= vh) by nra.
  assert (Hyh : 0 < yh) by nra.
  (* g = 1 / D with D = v + 1/y, and s D = v, (1 − s) D = 1/Y. *)
  set (D := v + / Y). set (Dh := vh + / yh).
  assert (HD : 0 < D) by (unfold D; pose proof (Rinv_0_lt_compat Y HY); lra).
  assert (HDh : 0 < Dh) by (unfold Dh; pose proof (Rinv_0_lt_compat yh Hyh); lra).
  assert (G : gain_map v Y = / D) by (unfold gain_map, D; field; lra).
  assert (Gh : gain_map vh yh = / Dh) by (unfold gain_map, Dh; field; nra).
  assert (Sv : s * D = v) by (unfold s, D; field; lra).
  assert (S1 : (1 - s) * D = / Y) by (unfold s, D; field; lra).
  set (M := s * exp V + (1 - s) * exp A). set (m := s * exp (- V) + (1 - s) * exp (- A)).
  assert (HM : 0 < M) by (unfold M; nra). assert (Hm : 0 < m) by (unfold m; nra).
  (* the ends: D m <= Dh <= D M *)
  assert (Hinv : exp (- A) * / Y <= / yh <= exp A * / Y).
  { apply log_bound_sandwich; try (apply Rinv_0_lt_compat; lra).
    rewrite !ln_Rinv by lra. rewrite Rabs_minus_sym.
    replace (- ln Y - - ln yh) with (ln yh - ln Y) by ring. apply sandwich_log_bound; [lra | split; lra]. }
  destruct Hinv as [Hinv2 Hinv1].
  assert (Up : Dh <= D * M).
  { unfold Dh, M. replace (D * (s * exp V + (1 - s) * exp A)) with (exp V * (s * D) + exp A * ((1 - s) * D)) by ring.
    rewrite Sv, S1. lra. }
  assert (Lo : D * m <= Dh).
  { unfold Dh, m. replace (D * (s * exp (- V) + (1 - s) * exp (- A))) with (exp (- V) * (s * D) + exp (- A) * ((1 - s) * D)) by ring.
    rewrite Sv, S1. lra. }
  (* m >= 1 / M *)
  assert (Mm : 1 <= M * m).
  { unfold M, m. rewrite !exp_Ropp.
    replace (s * / exp V + (1 - s) * / exp A) with (s / exp V + (1 - s) / exp A) by (unfold Rdiv; ring).
    apply mixed_cauchy; lra. }
  rewrite G, Gh, !ln_Rinv by lra.
  assert (L1 : ln Dh <= ln D + ln M) by (rewrite <- ln_mult by lra; apply ln_mono; lra).
  assert (L2 : ln D + ln m <= ln Dh) by (rewrite <- ln_mult by lra; apply ln_mono; nra).
  assert (L3 : 0 <= ln M + ln m) by (rewrite <- ln_mult by lra; rewrite <- ln_1; apply ln_mono; lra).
  fold M. apply Rabs_le. split; lra.
Qed.

(** The exact leaf's log-derivative at X = e^s is a X / ((a X + ω)(1 + v(a X + ω))) (det = a): the
    weight w_a = aX/(aX + ω), increasing in X, over 1 + vY, increasing too; so on the log-ball
    [x e^{−ρ}, x e^{ρ}] it is at most w_a(x e^{ρ}) / (1 + vY(x e^{−ρ})), and the mean value theorem
    makes that the leaf's Lipschitz factor between any two points of the ball
    (check/kdn_leaf_local.hpp, kdn_leaf_local_lipschitz). *)
Definition kdn_local_lipschitz (a omega v x rho : R) : R :=
  a * (x * exp rho) / (a * (x * exp rho) + omega) / (1 + v * (a * (x * exp (- rho)) + omega)).

Lemma kdn_leaf_derivative_bound : forall a omega v x rho s, 0 < a -> 0 <= omega -> 0 <= v -> 0 < x ->
  x * exp (- rho) <= exp s <= x * exp rho ->
  Rabs (bk_g' a omega (v * a) (1 + v * omega) s) <= kdn_local_lipschitz a omega v x rho.
Proof.
  intros a omega v x rho s Ha Ho Hv Hx [Hlo Hhi].
  set (X := exp s). fold X in Hlo, Hhi. assert (HX : 0 < X) by apply exp_pos.
  set (hi := x * exp rho) in *. set (lo := x * exp (- rho)) in *.
  assert (Hlo0 : 0 < lo) by (unfold lo; apply Rmult_lt_0_compat; [lra | apply exp_pos]).
  assert (Hhi0 : 0 < hi) by lra.
  assert (HaX : 0 < a * X) by nra.
  assert (N : 0 < a * X + omega) by lra.
  assert (D : 0 < v * a * X + (1 + v * omega)) by nra.
  rewrite bk_g'_eq by (fold X; lra). fold X.
  replace (X * (a * (1 + v * omega) - omega * (v * a))) with (a * X) by ring.
  rewrite Rabs_pos_eq by (apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; nra]).
  unfold kdn_local_lipschitz. fold hi lo.
  (* a X / (aX + ω) <= a hi / (a hi + ω) and 1 + v(a lo + ω) <= v a X + 1 + v ω *)
  assert (W : a * X / (a * X + omega) <= a * hi / (a * hi + omega)).
  { assert (Nh : 0 < a * hi + omega) by (assert (0 < a * hi) by (apply Rmult_lt_0_compat; lra); lra).
    apply (Rmult_le_reg_r ((a * X + omega) * (a * hi + omega))); [apply Rmult_lt_0_compat; lra |].
    replace (a * X / (a * X + omega) * ((a * X + omega) * (a * hi + omega))) with (a * X * (a * hi + omega)) by (field; lra).
    replace (a * hi / (a * hi + omega) * ((a * X + omega) * (a * hi + omega))) with (a * hi * (a * X + omega)) by (field; lra).
    assert (0 <= a * omega * (hi - X)) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
    nra. }
  assert (0 <= v * a * (X - lo)) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra).
  assert (G : 1 + v * (a * lo + omega) <= v * a * X + (1 + v * omega)) by nra.
  assert (0 <= v * (a * lo + omega)) by (apply Rmult_le_pos; [| assert (0 < a * lo) by (apply Rmult_lt_0_compat; lra)]; lra).
  assert (Hg0 : 0 < 1 + v * (a * lo + omega)) by lra.
  replace (a * X / ((a * X + omega) * (v * a * X + (1 + v * omega))))
    with (a * X / (a * X + omega) / (v * a * X + (1 + v * omega))) by (field; lra).
  unfold Rdiv at 2 4. apply Rmult_le_compat.
  - apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra].
  - left; apply Rinv_0_lt_compat; lra.
  - exact W.
  - apply Rinv_le_contravar; lra.
Qed.

Theorem kdn_leaf_local_lipschitz : forall a omega v x rho x1 x2, 0 < a -> 0 <= omega -> 0 <= v -> 0 < x ->
  x * exp (- rho) <= x1 <= x * exp rho -> x * exp (- rho) <= x2 <= x * exp rho ->
  Rabs (ln (act a omega (v * a) (1 + v * omega) x1) - ln (act a omega (v * a) (1 + v * omega) x2))
    <= kdn_local_lipschitz a omega v x rho * Rabs (ln x1 - ln x2).
Proof.
  intros a omega v x rho x1 x2 Ha Ho Hv Hx H1 H2.
  assert (Hx1 : 0 < x1) by (pose proof (exp_pos (- rho)); nra).
  assert (Hx2 : 0 < x2) by (pose proof (exp_pos (- rho)); nra).
  assert (Hd : 0 < 1 + v * omega) by nra.
  assert (Hva : 0 <= v * a) by nra.
  assert (Hg : forall z, 0 < z -> ln (act a omega (v * a) (1 + v * omega) z) = bk_g a omega (v * a) (1 + v * omega) (ln z)).
  { intros z Hz. unfold bk_g, act. rewrite exp_ln by assumption.
    apply ln_div_pos; [apply pos_num | apply pos_den]; assumption. }
  rewrite !Hg by assumption.
  (* the mean value theorem between two points of the ball *)
  assert (Hpos : forall y, x * exp (- rho) <= y -> 0 < y) by (intros y Hy; pose proof (exp_pos (- rho)); nra).
  assert (Hmvt : forall y1 y2, x * exp (- rho) <= y1 <= x * exp rho -> x * exp (- rho) <= y2 <= x * exp rho ->
            ln y1 < ln y2 ->
            Rabs (bk_g a omega (v * a) (1 + v * omega) (ln y2) - bk_g a omega (v * a) (1 + v * omega) (ln y1))
            <= kdn_local_lipschitz a omega v x rho * Rabs (ln y2 - ln y1)).
  { intros y1 y2 [Hy1 Hy1'] [Hy2 Hy2'] Hlt.
    pose proof (Hpos y1 Hy1) as P1. pose proof (Hpos y2 Hy2) as P2.
    destruct (MVT_cor2 (bk_g a omega (v * a) (1 + v * omega)) (bk_g' a omega (v * a) (1 + v * omega)) (ln y1) (ln y2) Hlt)
      as [z [Hz [Hz1 Hz2]]].
    - intros z _. apply bk_g_derive; [apply pos_num | apply pos_den]; try assumption; apply exp_pos.
    - rewrite Hz, Rabs_mult. apply Rmult_le_compat_r; [apply Rabs_pos |].
      apply kdn_leaf_derivative_bound; try assumption.
      assert (E1 : y1 <= exp z) by (rewrite <- (exp_ln y1) by exact P1; apply exp_mono; lra).
      assert (E2 : exp z <= y2) by (rewrite <- (exp_ln y2) by exact P2; apply exp_mono; lra).
      split; lra. }
  destruct (Rtotal_order (ln x1) (ln x2)) as [Hl | [He | Hl]].
  - rewrite Rabs_minus_sym, (Rabs_minus_sym (ln x1)). apply Hmvt; assumption.
  - rewrite He. unfold Rminus. rewrite !Rplus_opp_r, Rabs_R0, Rmult_0_r. lra.
  - apply Hmvt; assumption.
Qed.

(** The prediction's term a x moved by a factor θ ∈ [e^{−A}, e^{A}] moves a x + ω by at most
    ln(1 + w(e^A − 1)), w = a x/(ω + a x): AffineLogWeight.v where ω > 0, and A itself where ω = 0. *)
Lemma affine_term_within : forall a x omega th A, 0 < a -> 0 <= omega -> 0 < x -> 0 <= A ->
  exp (- A) <= th <= exp A ->
  Rabs (ln (a * x * th + omega) - ln (a * x + omega)) <= ln (1 + a * x / (omega + a * x) * (exp A - 1)).
Proof.
  intros a x omega th A Ha Ho Hx HA [Th1 Th2].
  assert (Hth : 0 < th) by (pose proof (exp_pos (- A)); lra).
  assert (Hax : 0 < a * x) by (apply Rmult_lt_0_compat; lra).
  destruct (Req_dec omega 0) as [Ho0 | Ho0].
  - (* no noise: a x θ against a x, and the weight is 1 *)
    subst omega. rewrite Rplus_0_l. unfold Rdiv. rewrite Rinv_r, Rmult_1_l by lra.
    replace (1 + (exp A - 1)) with (exp A) by ring. rewrite ln_exp, !Rplus_0_r.
    apply sandwich_log_bound; [exact Hax |]. split; nra.
  - replace (a * x * th + omega) with (omega + a * (x * exp (ln th))) by (rewrite exp_ln by exact Hth; ring).
    replace (a * x + omega) with (omega + a * x) by ring.
    apply affine_log_weight; try lra.
    apply Rabs_le. split.
    + rewrite <- (ln_exp (- A)). apply ln_mono; [apply exp_pos | exact Th1].
    + rewrite <- (ln_exp A). apply ln_mono; [exact Hth | exact Th2].
Qed.

(** ** The sup over the ball (check/kdn_leaf_local.hpp): the bounds above at a point y of the log-ball
    [x e^{−ρ}, x e^{ρ}] are at most their value with the weight w_a at the ball's top and s at the larger
    of the ball's two ends. *)

Definition gain_weight (v a omega z : R) : R := v * (a * z + omega) / (1 + v * (a * z + omega)).
Definition affine_err (a omega z A : R) : R := ln (1 + a * z / (omega + a * z) * (exp A - 1)).
Definition mixed (s V E : R) : R := ln (s * exp V + (1 - s) * exp E).

Lemma gain_weight_bounds : forall v a omega z1 z2, 0 <= v -> 0 < a -> 0 <= omega -> 0 < z1 -> z1 <= z2 ->
  0 <= gain_weight v a omega z1 <= gain_weight v a omega z2 /\ gain_weight v a omega z2 <= 1.
Proof.
  intros v a omega z1 z2 Hv Ha Ho Hz1 Hz.
  unfold gain_weight.
  set (Y1 := a * z1 + omega). set (Y2 := a * z2 + omega).
  assert (HY1 : 0 <= Y1) by (unfold Y1; nra). assert (HY : Y1 <= Y2) by (unfold Y1, Y2; nra).
  assert (P1 : 0 <= v * Y1) by nra. assert (P2 : v * Y1 <= v * Y2) by nra.
  split; [split |].
  - apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra].
  - apply (Rmult_le_reg_r ((1 + v * Y1) * (1 + v * Y2))); [nra |].
    replace (v * Y1 / (1 + v * Y1) * ((1 + v * Y1) * (1 + v * Y2))) with (v * Y1 * (1 + v * Y2)) by (field; lra).
    replace (v * Y2 / (1 + v * Y2) * ((1 + v * Y1) * (1 + v * Y2))) with (v * Y2 * (1 + v * Y1)) by (field; lra).
    nra.
  - apply (Rmult_le_reg_r (1 + v * Y2)); [lra |]. unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
Qed.

Lemma affine_err_increasing : forall a omega z1 z2 A, 0 < a -> 0 <= omega -> 0 < z1 -> z1 <= z2 -> 0 <= A ->
  affine_err a omega z1 A <= affine_err a omega z2 A.
Proof.
  intros a omega z1 z2 A Ha Ho Hz1 Hz HA. unfold affine_err.
  assert (HeA : 0 <= exp A - 1) by (assert (1 <= exp A) by (rewrite <- exp_0; apply exp_mono; lra); lra).
  assert (H1 : 0 < omega + a * z1) by nra. assert (H2 : 0 < omega + a * z2) by nra.
  assert (W : a * z1 / (omega + a * z1) <= a * z2 / (omega + a * z2)).
  { apply (Rmult_le_reg_r ((omega + a * z1) * (omega + a * z2))); [nra |].
    replace (a * z1 / (omega + a * z1) * ((omega + a * z1) * (omega + a * z2))) with (a * z1 * (omega + a * z2))
      by (field; lra).
    replace (a * z2 / (omega + a * z2) * ((omega + a * z1) * (omega + a * z2))) with (a * z2 * (omega + a * z1))
      by (field; lra).
    assert (0 <= a * omega * (z2 - z1)) by (apply Rmult_le_pos; [apply Rmult_le_pos |]; lra). nra. }
  assert (W0 : 0 <= a * z1 / (omega + a * z1)) by (apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; lra]).
  apply ln_mono; [nra | nra].
Qed.

(** ln(s e^V + (1 − s) e^E) grows with E and, affine in s inside the logarithm, is at most its larger
    value at the ends of [slo, shi] ⊂ [0, 1]. *)
Lemma mixed_at_ends : forall s slo shi V E Ehi, 0 <= slo -> slo <= s <= shi -> shi <= 1 -> E <= Ehi ->
  mixed s V E <= Rmax (mixed slo V Ehi) (mixed shi V Ehi).
Proof.
  intros s slo shi V E Ehi H0 [Hlo Hhi] H1 HE. unfold mixed.
  pose proof (exp_pos V). pose proof (exp_pos E). pose proof (exp_pos Ehi).
  assert (HEE : exp E <= exp Ehi) by (apply exp_mono; exact HE).
  assert (Step : s * exp V + (1 - s) * exp E <= s * exp V + (1 - s) * exp Ehi) by nra.
  assert (Pos : 0 < s * exp V + (1 - s) * exp E) by nra.
  destruct (Rle_dec (exp Ehi) (exp V)) as [Hup | Hdown].
  - apply Rle_trans with (ln (shi * exp V + (1 - shi) * exp Ehi)); [| apply Rmax_r].
    apply ln_mono; [exact Pos |]. nra.
  - apply Rle_trans with (ln (slo * exp V + (1 - slo) * exp Ehi)); [| apply Rmax_l].
    apply ln_mono; [exact Pos |]. nra.
Qed.

Section Local.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.

(** One rounding as a factor in [e^{−η}, e^{η}]. *)
Lemma round_factor : forall y, exists t, exp (- eta u) <= t <= exp (eta u) /\ fl y = y * t.
Proof.
  intros y. destruct (round 0 y y (rel_refl y)) as [t [Ht Hy]]. exists t.
  rewrite Rplus_0_l in Ht. split; assumption.
Qed.

(** ĉ x + d̂ = fl(v̂ â) x + fl(1 + fl(v̂ ω)) within two roundings of 1 + v̂ (â x + ω). *)
Lemma computed_denominator : forall a_hat omega vh x, 0 <= a_hat -> 0 <= omega -> 0 <= vh -> 0 < x ->
  exp (- (2 * eta u)) * (1 + vh * (a_hat * x + omega))
    <= fl (vh * a_hat) * x + fl (1 + fl (vh * omega))
    <= exp (2 * eta u) * (1 + vh * (a_hat * x + omega)).
Proof.
  intros a_hat omega vh x Ha Ho Hv Hx.
  pose proof (eta_nonneg u u_bounds) as He.
  destruct (round_factor (vh * a_hat)) as [t1 [T1 ->]].
  destruct (round_factor (vh * omega)) as [t2 [T2 ->]].
  destruct (round_factor (1 + vh * omega * t2)) as [t3 [T3 ->]].
  set (e := exp (eta u)). set (f := exp (- eta u)).
  change (exp (- eta u)) with f in T1, T2, T3. change (exp (eta u)) with e in T1, T2, T3.
  assert (Hef : e * f = 1) by (unfold e, f; rewrite <- exp_plus; replace (eta u + - eta u) with 0 by ring; apply exp_0).
  assert (He1 : 1 <= e) by (unfold e; rewrite <- exp_0; apply exp_mono; lra).
  assert (Hf1 : f <= 1) by (unfold f; rewrite <- exp_0; apply exp_mono; lra).
  assert (Hf0 : 0 < f) by apply exp_pos.
  assert (E2 : exp (2 * eta u) = e * e) by (unfold e; rewrite <- exp_plus; f_equal; ring).
  assert (F2 : exp (- (2 * eta u)) = f * f) by (unfold f; rewrite <- exp_plus; f_equal; ring).
  rewrite E2, F2.
  assert (P1 : 0 <= vh * a_hat * x) by (apply Rmult_le_pos; [apply Rmult_le_pos|]; lra).
  assert (P2 : 0 <= vh * omega) by (apply Rmult_le_pos; lra).
  assert (Ht2 : 0 <= t2) by lra. assert (Ht3 : 0 <= t3) by lra.
  assert (Hff : f * f <= f) by nra. assert (Hee : e <= e * e) by nra.
  assert (A1 : f * f * (vh * a_hat * x) <= vh * a_hat * t1 * x <= e * e * (vh * a_hat * x)) by (split; nra).
  assert (A2 : f * f <= t3 <= e * e) by (split; nra).
  assert (T23 : f * f <= t2 * t3 <= e * e) by (split; [apply Rmult_le_compat; lra | apply Rmult_le_compat; lra]).
  assert (A3 : f * f * (vh * omega) <= vh * omega * t2 * t3 <= e * e * (vh * omega)) by (split; nra).
  split; nra.
Qed.

(** The computed leaf's action at any x > 0 within the mixed bound plus two roundings of the exact
    leaf's, given â within A and v̂ within V. *)
Theorem kdn_leaf_local_action : forall a a_hat omega v vh A V x,
  0 < a -> 0 <= omega -> 0 <= v -> 0 < x -> 0 <= A -> 0 <= V ->
  rel A a a_hat -> rel V v vh ->
  Rabs (ln (act a_hat omega (fl (vh * a_hat)) (fl (1 + fl (vh * omega))) x)
        - ln (act a omega (v * a) (1 + v * omega) x))
    <= ln (v * (a * x + omega) / (1 + v * (a * x + omega)) * exp V
           + (1 - v * (a * x + omega) / (1 + v * (a * x + omega)))
             * exp (ln (1 + a * x / (omega + a * x) * (exp A - 1))))
       + 2 * eta u.
Proof.
  intros a a_hat omega v vh A V x Ha Ho Hv Hx HA HV Wa Wv.
  pose proof (eta_nonneg u u_bounds) as He.
  assert (Hax : 0 < a * x) by nra.
  set (Y := a * x + omega).
  assert (HY : 0 < Y) by (unfold Y; lra).
  destruct Wa as [th [[Th1 Th2] Ha_hat]].
  assert (Hth : 0 < th) by (pose proof (exp_pos (- A)); lra).
  assert (Hah : 0 < a_hat) by (rewrite Ha_hat; nra).
  set (yh := a_hat * x + omega).
  assert (Hyh : 0 < yh) by (unfold yh; nra).
  (* ŷ within A' of Y *)
  set (A' := ln (1 + a * x / (omega + a * x) * (exp A - 1))).
  assert (WA' : Rabs (ln yh - ln Y) <= A').
  { unfold yh, Y, A'. rewrite Ha_hat. replace (a * th * x) with (a * x * th) by ring.
    apply affine_term_within; lra. }
  assert (HA' : 0 <= A') by (pose proof (Rabs_pos (ln yh - ln Y)); lra).
  destruct Wv as [tv [[Tv1 Tv2] Hvh]].
  assert (Hvh0 : 0 <= vh) by (rewrite Hvh; pose proof (exp_pos (- V)); nra).
  (* g(v̂, ŷ) against g(v, Y) *)
  assert (G : Rabs (ln (gain_map vh yh) - ln (gain_map v Y))
              <= ln (v * Y / (1 + v * Y) * exp V + (1 - v * Y / (1 + v * Y)) * exp A')).
  { apply gain_map_mixed; try lra.
    - rewrite Hvh. split; nra.
    - apply log_bound_sandwich; assumption. }
  (* the computed denominator within 2η of 1 + v̂ ŷ *)
  pose proof (computed_denominator a_hat omega vh x (Rlt_le _ _ Hah) Ho Hvh0 Hx) as Den.
  fold yh in Den.
  set (den := fl (vh * a_hat) * x + fl (1 + fl (vh * omega))) in Den |- *.
  assert (Hden1 : 0 < 1 + vh * yh) by nra.
  assert (Dln : Rabs (ln den - ln (1 + vh * yh)) <= 2 * eta u) by (apply sandwich_log_bound; assumption).
  assert (Hden : 0 < den) by (pose proof (exp_pos (- (2 * eta u))); nra).
  assert (Act : act a_hat omega (fl (vh * a_hat)) (fl (1 + fl (vh * omega))) x = gain_map vh yh * ((1 + vh * yh) / den)).
  { assert (Hd1 : 1 + vh * (a_hat * x + omega) <> 0) by (unfold yh in Hden1; lra).
    unfold act, gain_map. fold den. unfold yh. field. split; lra. }
  rewrite Act, leaf_action_gain_map by lra. fold Y.
  assert (Hg : 0 < gain_map vh yh) by (unfold gain_map; apply Rdiv_lt_0_compat; lra).
  rewrite ln_mult by (try apply Rdiv_lt_0_compat; lra).
  rewrite ln_div_pos by lra.
  pose proof (abs_le_elim _ _ G). pose proof (abs_le_elim _ _ Dln).
  apply Rabs_le. split; lra.
Qed.


(** The sequential step b̂ = fl(fl(â x) + ω), b = fl(b̂ / fl(1 + fl(v̂ b̂))) from any x > 0 within the
    mixed bound of V and E_y = ln(1 + w(e^{A + η} − 1)) + η, plus 3η, of the exact leaf's action
    (check/kdn_leaf_local.hpp, kdn_step_local_error): the term fl(â x) within A + η of a x, the sum
    read through its weight, its rounding η; the denominator 2η; the quotient η. *)
Theorem kdn_step_local : forall a a_hat omega v vh A V x,
  0 < a -> 0 <= omega -> 0 <= v -> 0 < x -> 0 <= A -> 0 <= V ->
  rel A a a_hat -> rel V v vh ->
  Rabs (ln (fl (fl (fl (a_hat * x) + omega) / fl (1 + fl (vh * fl (fl (a_hat * x) + omega)))))
        - ln (act a omega (v * a) (1 + v * omega) x))
    <= ln (v * (a * x + omega) / (1 + v * (a * x + omega)) * exp (V)
           + (1 - v * (a * x + omega) / (1 + v * (a * x + omega)))
             * exp (ln (1 + a * x / (omega + a * x) * (exp (A + eta u) - 1)) + eta u))
       + 3 * eta u.
Proof.
  intros a a_hat omega v vh A V x Ha Ho Hv Hx HA HV Wa Wv.
  pose proof (eta_nonneg u u_bounds) as He.
  assert (Hax : 0 < a * x) by nra.
  set (Y := a * x + omega).
  assert (HY : 0 < Y) by (unfold Y; lra).
  (* the term fl(â x) = a x θ, θ within A + η *)
  destruct (round (A) (a * x) (a_hat * x)) as [th [Th Hterm]].
  { destruct Wa as [t [Tt ->]]. exists t. split; [exact Tt | ring]. }
  rewrite Hterm.
  set (Ey0 := ln (1 + a * x / (omega + a * x) * (exp (A + eta u) - 1))).
  assert (W0 : Rabs (ln (a * x * th + omega) - ln Y) <= Ey0) by (apply affine_term_within; lra).
  assert (HEy0 : 0 <= Ey0) by (pose proof (Rabs_pos (ln (a * x * th + omega) - ln Y)); lra).
  assert (Hq : 0 < a * x * th + omega) by (pose proof (exp_pos (- (A + eta u))); nra).
  (* p = fl(a x θ + ω) within Ey0 + η of Y *)
  destruct (round_factor (a * x * th + omega)) as [t2 [T2 Hp]].
  set (p := fl (a * x * th + omega)) in *.
  assert (Ht2 : 0 < t2) by (pose proof (exp_pos (- eta u)); lra).
  assert (Hp0 : 0 < p) by (rewrite Hp; nra).
  assert (Wp : Rabs (ln p - ln Y) <= Ey0 + eta u).
  { rewrite Hp, ln_mult by lra.
    assert (Rabs (ln t2) <= eta u).
    { apply Rabs_le. split.
      - rewrite <- (ln_exp (- eta u)). apply ln_mono; [apply exp_pos | lra].
      - rewrite <- (ln_exp (eta u)). apply ln_mono; lra. }
    pose proof (abs_le_elim _ _ W0). pose proof (abs_le_elim _ _ H). apply Rabs_le. split; lra. }
  destruct Wv as [tv [[Tv1 Tv2] Hvh]].
  assert (Hvh0 : 0 <= vh) by (rewrite Hvh; pose proof (exp_pos (- V)); nra).
  assert (G : Rabs (ln (gain_map vh p) - ln (gain_map v Y))
              <= ln (v * Y / (1 + v * Y) * exp V + (1 - v * Y / (1 + v * Y)) * exp (Ey0 + eta u))).
  { apply gain_map_mixed; try lra.
    - rewrite Hvh. split; nra.
    - apply log_bound_sandwich; assumption. }
  (* the denominator fl(1 + fl(v̂ p)) within 2η of 1 + v̂ p, the quotient's rounding η *)
  destruct (round_factor (vh * p)) as [t3 [T3 ->]].
  destruct (round_factor (1 + vh * p * t3)) as [t4 [T4 ->]].
  set (den := (1 + vh * p * t3) * t4).
  assert (Hvp : 0 <= vh * p) by nra.
  assert (Dsand : exp (- (2 * eta u)) * (1 + vh * p) <= den <= exp (2 * eta u) * (1 + vh * p)).
  { unfold den. set (e := exp (eta u)) in *. set (f := exp (- eta u)) in *.
    assert (Hef : e * f = 1) by (unfold e, f; rewrite <- exp_plus; replace (eta u + - eta u) with 0 by ring; apply exp_0).
    assert (He1 : 1 <= e) by (unfold e; rewrite <- exp_0; apply exp_mono; lra).
    assert (Hf1 : f <= 1) by (unfold f; rewrite <- exp_0; apply exp_mono; lra).
    assert (Hf0 : 0 < f) by apply exp_pos.
    replace (exp (2 * eta u)) with (e * e) by (unfold e; rewrite <- exp_plus; f_equal; ring).
    replace (exp (- (2 * eta u))) with (f * f) by (unfold f; rewrite <- exp_plus; f_equal; ring).
    assert (T34 : f * f <= t3 * t4 <= e * e) by (split; apply Rmult_le_compat; lra).
    assert (A4 : f * f <= t4 <= e * e) by (split; nra).
    assert (A34 : f * f * (vh * p) <= vh * p * t3 * t4 <= e * e * (vh * p)) by (split; nra).
    split; nra. }
  assert (Hden1 : 0 < 1 + vh * p) by lra.
  assert (Hden : 0 < den) by (pose proof (exp_pos (- (2 * eta u))); nra).
  assert (Dln : Rabs (ln den - ln (1 + vh * p)) <= 2 * eta u) by (apply sandwich_log_bound; assumption).
  destruct (round_factor (p / den)) as [t5 [T5 ->]].
  assert (Ht5 : 0 < t5) by (pose proof (exp_pos (- eta u)); lra).
  assert (L5 : Rabs (ln t5) <= eta u).
  { apply Rabs_le. split.
    - rewrite <- (ln_exp (- eta u)). apply ln_mono; [apply exp_pos | lra].
    - rewrite <- (ln_exp (eta u)). apply ln_mono; lra. }
  assert (Q : p / den * t5 = gain_map vh p * ((1 + vh * p) / den) * t5) by (unfold gain_map; field; lra).
  rewrite Q, leaf_action_gain_map by lra. fold Y.
  assert (Hg : 0 < gain_map vh p) by (unfold gain_map; apply Rdiv_lt_0_compat; lra).
  assert (Hr : 0 < (1 + vh * p) / den) by (apply Rdiv_lt_0_compat; lra).
  rewrite ln_mult by (try apply Rmult_lt_0_compat; lra).
  rewrite (ln_mult (gain_map vh p) ((1 + vh * p) / den)) by lra.
  rewrite ln_div_pos by lra.
  pose proof (abs_le_elim _ _ G). pose proof (abs_le_elim _ _ Dln). pose proof (abs_le_elim _ _ L5).
  apply Rabs_le. split; lra.
Qed.


(** The action error anywhere in the ball [x e^{−ρ}, x e^{ρ}] (check/kdn_leaf_local.hpp,
    kdn_leaf_local_action_error: w_a at the top, s at the larger end). *)
Theorem kdn_leaf_local_action_ball : forall a a_hat omega v vh A V x rho y,
  0 < a -> 0 <= omega -> 0 <= v -> 0 < x -> 0 <= A -> 0 <= V ->
  rel A a a_hat -> rel V v vh -> x * exp (- rho) <= y <= x * exp rho ->
  Rabs (ln (act a_hat omega (fl (vh * a_hat)) (fl (1 + fl (vh * omega))) y)
        - ln (act a omega (v * a) (1 + v * omega) y))
    <= Rmax (mixed (gain_weight v a omega (x * exp (- rho))) V (affine_err a omega (x * exp rho) A))
            (mixed (gain_weight v a omega (x * exp rho)) V (affine_err a omega (x * exp rho) A))
       + 2 * eta u.
Proof.
  intros a a_hat omega v vh A V x rho y Ha Ho Hv Hx HA HV Wa Wv [Hlo Hhi].
  assert (Hl0 : 0 < x * exp (- rho)) by (apply Rmult_lt_0_compat; [lra | apply exp_pos]).
  assert (Hy : 0 < y) by lra.
  pose proof (kdn_leaf_local_action a a_hat omega v vh A V y Ha Ho Hv Hy HA HV Wa Wv) as H.
  fold (gain_weight v a omega y) (affine_err a omega y A) (mixed (gain_weight v a omega y) V (affine_err a omega y A)) in H.
  destruct (gain_weight_bounds v a omega (x * exp (- rho)) y Hv Ha Ho Hl0 Hlo) as [[S0 S1] _].
  destruct (gain_weight_bounds v a omega y (x * exp rho) Hv Ha Ho Hy Hhi) as [[_ S2] S3].
  pose proof (affine_err_increasing a omega y (x * exp rho) A Ha Ho Hy Hhi HA) as E.
  pose proof (mixed_at_ends _ _ _ V _ _ S0 (conj S1 S2) S3 E). lra.
Qed.

(** The step error anywhere in the ball (check/kdn_leaf_local.hpp, kdn_step_local_error). *)
Theorem kdn_step_local_ball : forall a a_hat omega v vh A V x rho y,
  0 < a -> 0 <= omega -> 0 <= v -> 0 < x -> 0 <= A -> 0 <= V ->
  rel A a a_hat -> rel V v vh -> x * exp (- rho) <= y <= x * exp rho ->
  Rabs (ln (fl (fl (fl (a_hat * y) + omega) / fl (1 + fl (vh * fl (fl (a_hat * y) + omega)))))
        - ln (act a omega (v * a) (1 + v * omega) y))
    <= Rmax (mixed (gain_weight v a omega (x * exp (- rho))) V (affine_err a omega (x * exp rho) (A + eta u) + eta u))
            (mixed (gain_weight v a omega (x * exp rho)) V (affine_err a omega (x * exp rho) (A + eta u) + eta u))
       + 3 * eta u.
Proof.
  intros a a_hat omega v vh A V x rho y Ha Ho Hv Hx HA HV Wa Wv [Hlo Hhi].
  pose proof (eta_nonneg u u_bounds) as He.
  assert (Hl0 : 0 < x * exp (- rho)) by (apply Rmult_lt_0_compat; [lra | apply exp_pos]).
  assert (Hy : 0 < y) by lra.
  pose proof (kdn_step_local a a_hat omega v vh A V y Ha Ho Hv Hy HA HV Wa Wv) as H.
  fold (gain_weight v a omega y) (affine_err a omega y (A + eta u)) in H.
  fold (mixed (gain_weight v a omega y) V (affine_err a omega y (A + eta u) + eta u)) in H.
  destruct (gain_weight_bounds v a omega (x * exp (- rho)) y Hv Ha Ho Hl0 Hlo) as [[S0 S1] _].
  destruct (gain_weight_bounds v a omega y (x * exp rho) Hv Ha Ho Hy Hhi) as [[_ S2] S3].
  pose proof (affine_err_increasing a omega y (x * exp rho) (A + eta u) Ha Ho Hy Hhi ltac:(lra)) as E.
  pose proof (mixed_at_ends _ _ _ V (affine_err a omega y (A + eta u) + eta u) _ S0 (conj S1 S2) S3
                ltac:(apply Rplus_le_compat_r; exact E)). lra.
Qed.

End Local.
