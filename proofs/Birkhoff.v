(** * The contraction bound: docs/math.md §8 fact 4, "The contraction bound", items 1–5.

    Positive Möbius maps x ↦ (a x + b)/(c x + d) are contractions of Hilbert's projective
    metric, which on the positive reals (rays (x, 1)) is d(x, y) = |ln x − ln y| (Birkhoff).
    This file proves the facts behind the per-element error bounds of the Möbius
    (fractional-linear) recursions, over the reals:

    - Part 1 (item 1): [birkhoff_log_lipschitz]: |ln M·x − ln M·y| ≤ τ(M) |ln x − ln y| with
      τ(M) = |ad − bc|/(√(ad) + √(bc))², and 0 ≤ τ ≤ 1 ([birkhoff_tau_le_1]).  The proof is
      the mean value theorem for s ↦ ln M·eˢ, whose derivative X(ad − bc)/((aX + b)(cX + d))
      (X = eˢ) is bounded by τ because acX² + bd ≥ 2√(abcd) X.
    - Part 2 (item 2): the leaves of §8's table: τ = (√(1 + z) − √z)² with z = p̄φ (KLA, §6)
      or z = uω (KDN, §4–§5).
    - Part 3 (item 4): rounding as a perturbation: entries within e^{±k} of exact move the
      action by at most 2k in log ([act_perturbed]); a common factor moves nothing
      ([act_rescale]); one rounding (1 + δ), |δ| ≤ u, costs at most η = −ln(1 − u) in log
      ([ln_one_plus_delta]), so FloatError.v's "k roundings" are within e^{±kη}
      ([within_exp]).
    - Part 4 (items 3 and 5): composition, abstractly over maps on (0, ∞): a composition is
      Lipschitz with the product of the coefficients ([lipschitz_compose]); a node computed
      from computed children has E(N) ≤ E(L) + τ(L) E(R) + δ_N ([node_error]); any evaluation
      tree ([tree_error]); the sequential recursion E_t = τ_t E_{t−1} + δ_t
      ([sequential_error]), which stays bounded when the τ_t stay below 1
      ([sequential_uniform]).

    Only the standard library is used (its derivatives, [MVT_cor2], [exp], [ln], [sqrt]). *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError.
Open Scope R_scope.

(** ** Part 0: logarithms *)

Lemma abs_le_elim : forall x k, Rabs x <= k -> - k <= x <= k.
Proof.
  intros x k H. pose proof (Rle_abs x). pose proof (Rle_abs (- x)).
  rewrite Rabs_Ropp in *. lra.
Qed.

Lemma ln_le_mono : forall x y, 0 < x -> x <= y -> ln x <= ln y.
Proof.
  intros x y Hx [H|H]; [left; apply ln_increasing; assumption|subst; lra].
Qed.

Lemma ln_div_pos : forall x y, 0 < x -> 0 < y -> ln (x / y) = ln x - ln y.
Proof.
  intros x y Hx Hy. unfold Rdiv.
  rewrite ln_mult, ln_Rinv; [ring|assumption|assumption|apply Rinv_0_lt_compat; assumption].
Qed.

(** w within a factor e^{±k} of v > 0 is positive and |ln w − ln v| ≤ k. *)
Lemma ln_sandwich : forall v w k, 0 < v -> exp (- k) * v <= w <= exp k * v ->
  0 < w /\ Rabs (ln w - ln v) <= k.
Proof.
  intros v w k Hv [H1 H2].
  assert (0 < exp (- k) * v) by (apply Rmult_lt_0_compat; [apply exp_pos|assumption]).
  assert (Hw : 0 < w) by lra. split; [exact Hw|].
  apply ln_le_mono in H1; [|assumption]. apply ln_le_mono in H2; [|exact Hw].
  rewrite ln_mult, ln_exp in H1 by (try apply exp_pos; assumption).
  rewrite ln_mult, ln_exp in H2 by (try apply exp_pos; assumption).
  apply Rabs_le; lra.
Qed.

(** ** Part 1: Birkhoff's contraction coefficient (item 1) *)

(** The action of [[a, b], [c, d]] (Mobius.v's [apply], unbundled). *)
Definition act (a b c d x : R) : R := (a * x + b) / (c * x + d).

(** τ(M) = |ad − bc|/(√(ad) + √(bc))² (= tanh(Δ/4), Δ the projective diameter of the image of
    the positive cone; a leaf with b = 0 or c = 0 has τ = 1). *)
Definition birkhoff_tau (a b c d : R) : R :=
  Rabs (a * d - b * c) / Rsqr (sqrt (a * d) + sqrt (b * c)).

(** The AM-GM step: (aX + b)(cX + d) − (√(ad) + √(bc))² X = (√(ac) X − √(bd))². *)
Lemma amgm_square : forall sa sb sc sd X,
  (sa * sa * X + sb * sb) * (sc * sc * X + sd * sd) - Rsqr (sa * sd + sb * sc) * X
  = Rsqr (sa * sc * X - sb * sd).
Proof. intros; unfold Rsqr; ring. Qed.

Lemma birkhoff_amgm : forall a b c d X, 0 <= a -> 0 <= b -> 0 <= c -> 0 <= d ->
  Rsqr (sqrt (a * d) + sqrt (b * c)) * X <= (a * X + b) * (c * X + d).
Proof.
  intros a b c d X Ha Hb Hc Hd.
  pose proof (amgm_square (sqrt a) (sqrt b) (sqrt c) (sqrt d) X) as E.
  rewrite !sqrt_sqrt in E by assumption.
  rewrite !sqrt_mult by assumption.
  pose proof (Rle_0_sqr (sqrt a * sqrt c * X - sqrt b * sqrt d)). lra.
Qed.

Lemma birkhoff_den_pos : forall a b c d, 0 < a -> 0 <= b -> 0 <= c -> 0 < d ->
  0 < Rsqr (sqrt (a * d) + sqrt (b * c)).
Proof.
  intros a b c d Ha Hb Hc Hd.
  assert (0 < sqrt (a * d)) by (apply sqrt_lt_R0, Rmult_lt_0_compat; assumption).
  pose proof (sqrt_pos (b * c)).
  unfold Rsqr. apply Rmult_lt_0_compat; lra.
Qed.

Theorem birkhoff_tau_le_1 : forall a b c d, 0 < a -> 0 <= b -> 0 <= c -> 0 < d ->
  0 <= birkhoff_tau a b c d <= 1.
Proof.
  intros a b c d Ha Hb Hc Hd.
  pose proof (birkhoff_den_pos a b c d Ha Hb Hc Hd) as Hden.
  assert (Had : 0 <= a * d) by (apply Rmult_le_pos; lra).
  assert (Hbc : 0 <= b * c) by (apply Rmult_le_pos; lra).
  pose proof (sqrt_sqrt _ Had). pose proof (sqrt_sqrt _ Hbc).
  pose proof (sqrt_pos (a * d)). pose proof (sqrt_pos (b * c)).
  assert (Hsq : Rsqr (sqrt (a * d) + sqrt (b * c))
                = a * d + b * c + 2 * (sqrt (a * d) * sqrt (b * c))) by (unfold Rsqr; nra).
  assert (0 <= sqrt (a * d) * sqrt (b * c)) by (apply Rmult_le_pos; assumption).
  assert (Habs : Rabs (a * d - b * c) <= Rsqr (sqrt (a * d) + sqrt (b * c)))
    by (rewrite Hsq; apply Rabs_le; lra).
  unfold birkhoff_tau. split.
  - unfold Rdiv. apply Rmult_le_pos; [apply Rabs_pos|left; apply Rinv_0_lt_compat; lra].
  - apply (Rmult_le_reg_r (Rsqr (sqrt (a * d) + sqrt (b * c)))); [assumption|].
    unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
Qed.

(** s ↦ ln M·eˢ, written as ln(a eˢ + b) − ln(c eˢ + d), and its derivative. *)
Definition bk_g (a b c d s : R) : R := ln (a * exp s + b) - ln (c * exp s + d).
Definition bk_g' (a b c d s : R) : R :=
  a * exp s / (a * exp s + b) - c * exp s / (c * exp s + d).

Lemma affine_exp_derive : forall a b s,
  derivable_pt_lim (fun s => a * exp s + b) s (a * exp s).
Proof.
  intros a b s. replace (a * exp s) with (a * exp s + 0) by ring.
  apply (derivable_pt_lim_plus (fun s => a * exp s) (fct_cte b)).
  - apply (derivable_pt_lim_scal exp a s (exp s)), derivable_pt_lim_exp.
  - apply derivable_pt_lim_const.
Qed.

Lemma ln_affine_exp_derive : forall a b s, 0 < a * exp s + b ->
  derivable_pt_lim (fun s => ln (a * exp s + b)) s (a * exp s / (a * exp s + b)).
Proof.
  intros a b s H.
  replace (a * exp s / (a * exp s + b)) with (/ (a * exp s + b) * (a * exp s))
    by (field; lra).
  apply (derivable_pt_lim_comp (fun s => a * exp s + b) ln s).
  - apply affine_exp_derive.
  - apply derivable_pt_lim_ln; assumption.
Qed.

Lemma bk_g_derive : forall a b c d s, 0 < a * exp s + b -> 0 < c * exp s + d ->
  derivable_pt_lim (bk_g a b c d) s (bk_g' a b c d s).
Proof.
  intros a b c d s H1 H2. unfold bk_g, bk_g'.
  apply (derivable_pt_lim_minus (fun s => ln (a * exp s + b)) (fun s => ln (c * exp s + d)));
    apply ln_affine_exp_derive; assumption.
Qed.

Lemma bk_g'_eq : forall a b c d s, 0 < a * exp s + b -> 0 < c * exp s + d ->
  bk_g' a b c d s = exp s * (a * d - b * c) / ((a * exp s + b) * (c * exp s + d)).
Proof. intros a b c d s H1 H2. unfold bk_g'. field; lra. Qed.

Lemma pos_num : forall a b X, 0 < a -> 0 <= b -> 0 < X -> 0 < a * X + b.
Proof.
  intros a b X Ha Hb HX. assert (0 < a * X) by (apply Rmult_lt_0_compat; assumption). lra.
Qed.

Lemma pos_den : forall c d X, 0 <= c -> 0 < d -> 0 < X -> 0 < c * X + d.
Proof.
  intros c d X Hc Hd HX. assert (0 <= c * X) by (apply Rmult_le_pos; lra). lra.
Qed.

(** |g'(s)| ≤ τ: X|ad − bc|/((aX + b)(cX + d)) ≤ X|ad − bc|/((√(ad) + √(bc))² X). *)
Lemma bk_g'_bound : forall a b c d s, 0 < a -> 0 <= b -> 0 <= c -> 0 < d ->
  Rabs (bk_g' a b c d s) <= birkhoff_tau a b c d.
Proof.
  intros a b c d s Ha Hb Hc Hd.
  set (X := exp s). assert (HX : 0 < X) by apply exp_pos.
  pose proof (pos_num a b X Ha Hb HX) as HN. pose proof (pos_den c d X Hc Hd HX) as HD.
  rewrite bk_g'_eq by assumption. fold X.
  set (S := Rsqr (sqrt (a * d) + sqrt (b * c))).
  assert (HS : 0 < S) by (apply birkhoff_den_pos; assumption).
  assert (HP : S * X <= (a * X + b) * (c * X + d)) by (apply birkhoff_amgm; lra).
  assert (0 < (a * X + b) * (c * X + d)) by (apply Rmult_lt_0_compat; assumption).
  unfold Rdiv. rewrite !Rabs_mult, (Rabs_pos_eq X), (Rabs_pos_eq (/ _)) by
    (try (left; apply Rinv_0_lt_compat); lra).
  unfold birkhoff_tau. fold S.
  assert (Hinv : / ((a * X + b) * (c * X + d)) <= / (S * X))
    by (apply Rinv_le_contravar; [apply Rmult_lt_0_compat|]; assumption).
  assert (X * / ((a * X + b) * (c * X + d)) <= / S).
  { apply Rle_trans with (X * / (S * X)).
    - apply Rmult_le_compat_l; lra.
    - right. field. lra. }
  pose proof (Rabs_pos (a * d - b * c)).
  replace (X * Rabs (a * d - b * c) * / ((a * X + b) * (c * X + d)))
    with (Rabs (a * d - b * c) * (X * / ((a * X + b) * (c * X + d)))) by ring.
  apply Rmult_le_compat_l; assumption.
Qed.

(** Item 1: a positive map (a, d > 0; b, c ≥ 0) is τ-Lipschitz in Hilbert's metric. *)
Theorem birkhoff_log_lipschitz : forall a b c d x y,
  0 < a -> 0 <= b -> 0 <= c -> 0 < d -> 0 < x -> 0 < y ->
  Rabs (ln (act a b c d x) - ln (act a b c d y)) <= birkhoff_tau a b c d * Rabs (ln x - ln y).
Proof.
  intros a b c d x y Ha Hb Hc Hd Hx Hy.
  assert (Hg : forall z, 0 < z -> ln (act a b c d z) = bk_g a b c d (ln z)).
  { intros z Hz. unfold bk_g, act. rewrite exp_ln by assumption.
    apply ln_div_pos; [apply pos_num|apply pos_den]; assumption. }
  rewrite !Hg by assumption.
  assert (Hmvt : forall s1 s2, s1 < s2 ->
            Rabs (bk_g a b c d s2 - bk_g a b c d s1) <= birkhoff_tau a b c d * Rabs (s2 - s1)).
  { intros s1 s2 Hlt.
    destruct (MVT_cor2 (bk_g a b c d) (bk_g' a b c d) s1 s2 Hlt) as [z [Hz _]].
    - intros z _. apply bk_g_derive; [apply pos_num|apply pos_den]; try assumption;
        apply exp_pos.
    - rewrite Hz, Rabs_mult. apply Rmult_le_compat_r; [apply Rabs_pos|].
      apply bk_g'_bound; assumption. }
  destruct (Rtotal_order (ln x) (ln y)) as [Hl|[He|Hl]].
  - rewrite Rabs_minus_sym, (Rabs_minus_sym (ln x)). apply Hmvt; assumption.
  - rewrite He. unfold Rminus. rewrite !Rplus_opp_r, Rabs_R0. lra.
  - apply Hmvt; assumption.
Qed.

(** ** Part 2: the leaves (item 2) *)

(** If ad = k²(1 + z) and bc = k² z (k > 0, z ≥ 0), then det = k² and
    τ = 1/(√(1 + z) + √z)² = (√(1 + z) − √z)². *)
Lemma birkhoff_tau_z : forall a b c d k z, 0 < k -> 0 <= z ->
  a * d = k * k * (1 + z) -> b * c = k * k * z ->
  birkhoff_tau a b c d = Rsqr (sqrt (1 + z) - sqrt z).
Proof.
  intros a b c d k z Hk Hz Had Hbc.
  unfold birkhoff_tau. rewrite Had, Hbc.
  replace (k * k * (1 + z) - k * k * z) with (k * k) by ring.
  assert (0 < k * k) by (apply Rmult_lt_0_compat; assumption).
  rewrite Rabs_pos_eq by lra.
  rewrite (sqrt_mult (k * k) (1 + z)), (sqrt_mult (k * k) z), sqrt_square by lra.
  set (sp := sqrt (1 + z)). set (sq := sqrt z).
  assert (Hsp : sp * sp = 1 + z) by (apply sqrt_sqrt; lra).
  assert (Hsq : sq * sq = z) by (apply sqrt_sqrt; lra).
  assert (0 < sp) by (apply sqrt_lt_R0; lra).
  assert (0 <= sq) by apply sqrt_pos.
  assert (Hpos : 0 < k * sp + k * sq) by nra.
  replace (k * k) with (Rsqr (k * sp + k * sq) * Rsqr (sp - sq)) at 1.
  - unfold Rsqr. field. lra.
  - unfold Rsqr.
    replace ((k * sp + k * sq) * (k * sp + k * sq) * ((sp - sq) * (sp - sq)))
      with (k * k * ((sp * sp - sq * sq) * (sp * sp - sq * sq))) by ring.
    rewrite Hsp, Hsq. ring.
Qed.

(** The KLA precision leaf [[1 + p̄φ, ā²φ], [p̄, ā²]] (§6; Models.v's [kla_precision_leaf]):
    det ā², τ = (√(1 + p̄φ) − √(p̄φ))². *)
Theorem kla_leaf_tau : forall abar phi pbar, 0 < abar -> 0 <= phi -> 0 <= pbar ->
  birkhoff_tau (1 + pbar * phi) (abar ^ 2 * phi) pbar (abar ^ 2)
  = Rsqr (sqrt (1 + pbar * phi) - sqrt (pbar * phi)).
Proof.
  intros abar phi pbar Ha Hphi Hp.
  apply (birkhoff_tau_z _ _ _ _ abar); [assumption|apply Rmult_le_pos; assumption|ring|ring].
Qed.

(** The diagonal KDN covariance leaf [[α², ω], [uα², 1 + uω]] (§4): det α²,
    τ = (√(1 + uω) − √(uω))². *)
Theorem kdn_leaf_tau : forall alpha u omega, 0 < alpha -> 0 <= u -> 0 <= omega ->
  birkhoff_tau (alpha ^ 2) omega (u * alpha ^ 2) (1 + u * omega)
  = Rsqr (sqrt (1 + u * omega) - sqrt (u * omega)).
Proof.
  intros alpha u omega Ha Hu Ho.
  apply (birkhoff_tau_z _ _ _ _ alpha); [assumption|apply Rmult_le_pos; assumption|ring|ring].
Qed.

(** The diagonal KDN precision leaf [[1 + uω, uα²], [ω, α²]] (the same map on 1/p). *)
Theorem kdn_precision_leaf_tau : forall alpha u omega, 0 < alpha -> 0 <= u -> 0 <= omega ->
  birkhoff_tau (1 + u * omega) (u * alpha ^ 2) omega (alpha ^ 2)
  = Rsqr (sqrt (1 + u * omega) - sqrt (u * omega)).
Proof.
  intros alpha u omega Ha Hu Ho.
  apply (birkhoff_tau_z _ _ _ _ alpha); [assumption|apply Rmult_le_pos; assumption|ring|ring].
Qed.

(** The isotropic KDN covariance leaf [[a, ω], [ua, 1 + uω]] (§5): det a. *)
Theorem iso_leaf_tau : forall a u omega, 0 < a -> 0 <= u -> 0 <= omega ->
  birkhoff_tau a omega (u * a) (1 + u * omega)
  = Rsqr (sqrt (1 + u * omega) - sqrt (u * omega)).
Proof.
  intros a u omega Ha Hu Ho.
  pose proof (sqrt_sqrt a (Rlt_le _ _ Ha)) as Hs.
  apply (birkhoff_tau_z _ _ _ _ (sqrt a));
    [apply sqrt_lt_R0; assumption|apply Rmult_le_pos; assumption|rewrite Hs; ring|
     rewrite Hs; ring].
Qed.

(** ** Part 3: rounding as a perturbation (item 4) *)

Lemma lin_sandwich : forall a b a' b' k x, 0 <= x ->
  exp (- k) * a <= a' <= exp k * a -> exp (- k) * b <= b' <= exp k * b ->
  exp (- k) * (a * x + b) <= a' * x + b' <= exp k * (a * x + b).
Proof.
  intros a b a' b' k x Hx [Ha1 Ha2] [Hb1 Hb2].
  assert (exp (- k) * a * x <= a' * x) by (apply Rmult_le_compat_r; assumption).
  assert (a' * x <= exp k * a * x) by (apply Rmult_le_compat_r; assumption).
  split; nra.
Qed.

(** Entries within e^{±k} of a non-negative map with positive numerator and denominator at x:
    the action moves by at most 2k in log. *)
Theorem act_perturbed : forall a b c d a' b' c' d' k x,
  0 <= a -> 0 <= b -> 0 <= c -> 0 <= d -> 0 < x -> 0 < a * x + b -> 0 < c * x + d -> 0 <= k ->
  exp (- k) * a <= a' <= exp k * a -> exp (- k) * b <= b' <= exp k * b ->
  exp (- k) * c <= c' <= exp k * c -> exp (- k) * d <= d' <= exp k * d ->
  Rabs (ln (act a' b' c' d' x) - ln (act a b c d x)) <= 2 * k.
Proof.
  intros a b c d a' b' c' d' k x Ha Hb Hc Hd Hx HN HD Hk Ha' Hb' Hc' Hd'.
  destruct (ln_sandwich (a * x + b) (a' * x + b') k HN) as [HN' EN];
    [apply lin_sandwich; lra|].
  destruct (ln_sandwich (c * x + d) (c' * x + d') k HD) as [HD' ED];
    [apply lin_sandwich; lra|].
  unfold act. rewrite !ln_div_pos by assumption.
  apply abs_le_elim in EN. apply abs_le_elim in ED.
  apply Rabs_le. lra.
Qed.

(** A common positive factor changes no action (§8 fact 3; Mobius.v's [apply_scale]). *)
Theorem act_rescale : forall s a b c d x, 0 < s -> c * x + d <> 0 ->
  act (s * a) (s * b) (s * c) (s * d) x = act a b c d x.
Proof.
  intros s a b c d x Hs H. unfold act.
  replace (s * c * x + s * d) with (s * (c * x + d)) by ring.
  field. split; lra.
Qed.

(** η = −ln(1 − u): the log-cost of one rounding. *)
Definition eta (u : R) : R := - ln (1 - u).

Lemma ln_one_plus_delta : forall u delta, 0 <= u < 1 -> Rabs delta <= u ->
  Rabs (ln (1 + delta)) <= - ln (1 - u).
Proof.
  intros u delta [Hu0 Hu1] Hd. apply abs_le_elim in Hd.
  assert (H1 : 1 - u <= 1 + delta) by lra.
  apply ln_le_mono in H1; [|lra].
  assert (H2 : 1 + delta <= / (1 - u)).
  { apply (Rmult_le_reg_r (1 - u)); [lra|]. rewrite Rinv_l by lra. nra. }
  apply ln_le_mono in H2; [|lra]. rewrite ln_Rinv in H2 by lra.
  apply Rabs_le; lra.
Qed.

Lemma eta_nonneg : forall u, 0 <= u < 1 -> 0 <= eta u.
Proof.
  intros u Hu. unfold eta.
  assert (ln (1 - u) <= ln 1) by (apply ln_le_mono; lra). rewrite ln_1 in H. lra.
Qed.

(** FloatError.v's "k roundings" ([within u k x y]: y/x ∈ [(1 − u)^k, (1 + u)^k]) are within
    e^{±kη}: (1 − u)^k = e^{−kη} and (1 + u)^k ≤ (1 − u)^{−k} = e^{kη}.  With
    [act_perturbed] (k := kη) a map whose entries carry k roundings acts within 2kη. *)
Theorem within_exp : forall u k x y, 0 <= u < 1 -> 0 <= x -> within u k x y ->
  exp (- (INR k * eta u)) * x <= y <= exp (INR k * eta u) * x.
Proof.
  intros u k x y Hu Hx [H1 H2].
  assert (E1 : exp (- (INR k * eta u)) = (1 - u) ^ k).
  { unfold eta. replace (- (INR k * - ln (1 - u))) with (INR k * ln (1 - u)) by ring.
    rewrite <- ln_pow by lra. apply exp_ln, pow_lt; lra. }
  assert (E2 : exp (INR k * eta u) = (/ (1 - u)) ^ k).
  { unfold eta. rewrite <- ln_Rinv, <- ln_pow by (try apply Rinv_0_lt_compat; lra).
    apply exp_ln, pow_lt, Rinv_0_lt_compat; lra. }
  assert (Hle : (1 + u) ^ k <= (/ (1 - u)) ^ k).
  { apply pow_incr. split; [lra|].
    apply (Rmult_le_reg_r (1 - u)); [lra|]. rewrite Rinv_l by lra. nra. }
  rewrite E1, E2. split; [assumption|].
  eapply Rle_trans; [exact H2|]. apply Rmult_le_compat_r; assumption.
Qed.

(** ** Part 4: composition and evaluation trees (items 3 and 5) *)

(** [log_err f g e]: f and g map (0, ∞) into itself and are within e of each other in
    Hilbert's metric (the supremum over x of the log-error of the action is ≤ e). *)
Definition log_err (f g : R -> R) (e : R) :=
  forall x, 0 < x -> 0 < f x /\ 0 < g x /\ Rabs (ln (f x) - ln (g x)) <= e.

(** [log_lipschitz f t]: f maps (0, ∞) into itself and is t-Lipschitz in Hilbert's metric. *)
Definition log_lipschitz (f : R -> R) (t : R) :=
  forall x y, 0 < x -> 0 < y -> 0 < f x /\ Rabs (ln (f x) - ln (f y)) <= t * Rabs (ln x - ln y).

(** A positive map is [log_lipschitz] with its τ (Part 1). *)
Corollary act_log_lipschitz : forall a b c d, 0 < a -> 0 <= b -> 0 <= c -> 0 < d ->
  log_lipschitz (act a b c d) (birkhoff_tau a b c d).
Proof.
  intros a b c d Ha Hb Hc Hd x y Hx Hy. split.
  - unfold act. apply Rdiv_lt_0_compat; [apply pos_num|apply pos_den]; assumption.
  - apply birkhoff_log_lipschitz; assumption.
Qed.

(** A computed positive map whose entries are within e^{±k} of exact is [log_err] 2k
    (Part 3). *)
Corollary act_log_err : forall a b c d a' b' c' d' k,
  0 < a -> 0 <= b -> 0 <= c -> 0 < d -> 0 <= k ->
  exp (- k) * a <= a' <= exp k * a -> exp (- k) * b <= b' <= exp k * b ->
  exp (- k) * c <= c' <= exp k * c -> exp (- k) * d <= d' <= exp k * d ->
  log_err (act a' b' c' d') (act a b c d) (2 * k).
Proof.
  intros a b c d a' b' c' d' k Ha Hb Hc Hd Hk Ha' Hb' Hc' Hd' x Hx.
  pose proof (pos_num a b x Ha Hb Hx) as HN. pose proof (pos_den c d x Hc Hd Hx) as HD.
  destruct (ln_sandwich _ (a' * x + b') k HN) as [HN' _]; [apply lin_sandwich; lra|].
  destruct (ln_sandwich _ (c' * x + d') k HD) as [HD' _]; [apply lin_sandwich; lra|].
  split; [|split].
  - unfold act. apply Rdiv_lt_0_compat; assumption.
  - unfold act. apply Rdiv_lt_0_compat; assumption.
  - apply act_perturbed; lra.
Qed.

(** A Lipschitz coefficient is non-negative (take x = 1, y = e). *)
Lemma log_lipschitz_nonneg : forall f t, log_lipschitz f t -> 0 <= t.
Proof.
  intros f t H. destruct (H 1 (exp 1)) as [_ H1]; [lra|apply exp_pos|].
  rewrite ln_1, ln_exp, (Rabs_minus_sym 0 1) in H1. replace (1 - 0) with 1 in H1 by ring.
  rewrite Rabs_R1 in H1. pose proof (Rabs_pos (ln (f 1) - ln (f (exp 1)))). lra.
Qed.

(** Item 3: τ(f ∘ g) ≤ τ(f) τ(g). *)
Theorem lipschitz_compose : forall f g t1 t2, log_lipschitz f t1 -> log_lipschitz g t2 ->
  0 <= t1 -> log_lipschitz (fun x => f (g x)) (t1 * t2).
Proof.
  intros f g t1 t2 Hf Hg Ht1 x y Hx Hy.
  destruct (Hg x y Hx Hy) as [Hgx Hgxy]. destruct (Hg y x Hy Hx) as [Hgy _].
  destruct (Hf (g x) (g y) Hgx Hgy) as [Hfx Hfxy].
  split; [assumption|].
  eapply Rle_trans; [exact Hfxy|]. rewrite Rmult_assoc.
  apply Rmult_le_compat_l; assumption.
Qed.

(** Item 5: a node N = L·R computed from the computed children Lc, Rc with its own rounding
    δ (|ln Nc − ln Lc∘Rc| ≤ δ) is within E(L) + τ(L) E(R) + δ of the exact L∘R.  L is the
    later map, applied last. *)
Theorem node_error : forall (Lc L Rc Rx Nc : R -> R) eL eR d tL,
  log_err Lc L eL -> log_err Rc Rx eR -> log_lipschitz L tL -> 0 <= tL ->
  (forall x, 0 < x -> 0 < Nc x /\ Rabs (ln (Nc x) - ln (Lc (Rc x))) <= d) ->
  log_err Nc (fun x => L (Rx x)) (eL + tL * eR + d).
Proof.
  intros Lc L Rc Rx Nc eL eR d tL HL HR HLip HtL HN x Hx.
  destruct (HN x Hx) as [HNx HNd].
  destruct (HR x Hx) as [HRcx [HRx HRe]].
  destruct (HL (Rc x) HRcx) as [_ [_ HLe]].
  destruct (HLip (Rc x) (Rx x) HRcx HRx) as [_ HLl].
  destruct (HLip (Rx x) (Rx x) HRx HRx) as [HLRx _].
  split; [assumption|split; [assumption|]].
  replace (ln (Nc x) - ln (L (Rx x)))
    with ((ln (Nc x) - ln (Lc (Rc x))) + (ln (Lc (Rc x)) - ln (L (Rc x)))
          + (ln (L (Rc x)) - ln (L (Rx x)))) by ring.
  assert (tL * Rabs (ln (Rc x) - ln (Rx x)) <= tL * eR) by (apply Rmult_le_compat_l; assumption).
  eapply Rle_trans; [apply Rabs_triang|].
  pose proof (Rabs_triang (ln (Nc x) - ln (Lc (Rc x))) (ln (Lc (Rc x)) - ln (L (Rc x)))).
  lra.
Qed.

(** Evaluation trees: a leaf carries its computed map, its exact map, its error (log_err) and
    its coefficient (log_lipschitz); a node carries its computed map and its own rounding
    error δ relative to the composition of its computed children (left = later). *)
Inductive etree : Type :=
| ELeaf (fc f : R -> R) (e t : R)
| ENode (l r : etree) (nc : R -> R) (d : R).

Definition computed (T : etree) : R -> R :=
  match T with ELeaf fc _ _ _ => fc | ENode _ _ nc _ => nc end.

Fixpoint exact (T : etree) : R -> R :=
  match T with
  | ELeaf _ f _ _ => f
  | ENode l r _ _ => fun x => exact l (exact r x)
  end.

(** τ of a subtree: the product of its leaves' coefficients. *)
Fixpoint tree_tau (T : etree) : R :=
  match T with
  | ELeaf _ _ _ t => t
  | ENode l r _ _ => tree_tau l * tree_tau r
  end.

(** B(leaf) = e; B(node l r) = B(l) + τ(l) B(r) + δ. *)
Fixpoint tree_bound (T : etree) : R :=
  match T with
  | ELeaf _ _ e _ => e
  | ENode l r _ d => tree_bound l + tree_tau l * tree_bound r + d
  end.

(** The hypotheses: each leaf is within its error of its exact map, which is Lipschitz with its
    coefficient; each node's computed map is within δ of its computed children's composition. *)
Fixpoint tree_ok (T : etree) : Prop :=
  match T with
  | ELeaf fc f e t => log_err fc f e /\ log_lipschitz f t
  | ENode l r nc d => tree_ok l /\ tree_ok r /\
      forall x, 0 < x -> 0 < nc x /\ Rabs (ln (nc x) - ln (computed l (computed r x))) <= d
  end.

Lemma tree_lipschitz : forall T, tree_ok T ->
  log_lipschitz (exact T) (tree_tau T) /\ 0 <= tree_tau T.
Proof.
  induction T as [fc f e t|l IHl r IHr nc d]; simpl.
  - intros [_ H]. split; [assumption|apply (log_lipschitz_nonneg f); assumption].
  - intros [Hl [Hr _]]. destruct (IHl Hl) as [Ll Tl]. destruct (IHr Hr) as [Lr Tr].
    split; [apply lipschitz_compose; assumption|apply Rmult_le_pos; assumption].
Qed.

(** Item 5, any evaluation tree: the computed root is within [tree_bound] of the exact
    composition of the leaves, in Hilbert's metric, for every x > 0. *)
Theorem tree_error : forall T, tree_ok T -> log_err (computed T) (exact T) (tree_bound T).
Proof.
  induction T as [fc f e t|l IHl r IHr nc d]; simpl.
  - intros [H _]. exact H.
  - intros [Hl [Hr Hn]]. destruct (tree_lipschitz l Hl) as [Ll Tl].
    apply (node_error (computed l) (exact l) (computed r) (exact r) nc); auto.
Qed.

(** The sequential recursion x_t = f_t(x_{t−1}) (t ≥ 1), x̂_t = f̂_t(x̂_{t−1}). *)
Fixpoint traj (f : nat -> R -> R) (x0 : R) (t : nat) : R :=
  match t with
  | O => x0
  | S t' => f (S t') (traj f x0 t')
  end.

(** E_0 given, E_t = τ_t E_{t−1} + δ_t. *)
Fixpoint seq_bound (tau delta : nat -> R) (E0 : R) (t : nat) : R :=
  match t with
  | O => E0
  | S t' => tau (S t') * seq_bound tau delta E0 t' + delta (S t')
  end.

Theorem sequential_error : forall (f fh : nat -> R -> R) (tau delta : nat -> R) x0 xh0,
  0 < x0 -> 0 < xh0 ->
  (forall t, (0 < t)%nat -> log_err (fh t) (f t) (delta t)) ->
  (forall t, (0 < t)%nat -> log_lipschitz (f t) (tau t)) ->
  forall t, 0 < traj fh xh0 t /\ 0 < traj f x0 t /\
    Rabs (ln (traj fh xh0 t) - ln (traj f x0 t))
    <= seq_bound tau delta (Rabs (ln xh0 - ln x0)) t.
Proof.
  intros f fh tau delta x0 xh0 Hx0 Hxh0 Herr Hlip t.
  induction t as [|t [Hh [Hx IH]]]; simpl.
  - split; [assumption|split; [assumption|lra]].
  - assert (Ht : (0 < S t)%nat) by lia.
    destruct (Herr (S t) Ht (traj fh xh0 t) Hh) as [Hfh [Hfhx Hd]].
    destruct (Hlip (S t) Ht (traj fh xh0 t) (traj f x0 t) Hh Hx) as [_ Hl].
    destruct (Hlip (S t) Ht (traj f x0 t) (traj f x0 t) Hx Hx) as [Hfx _].
    pose proof (log_lipschitz_nonneg _ _ (Hlip (S t) Ht)) as Htau.
    split; [assumption|split; [assumption|]].
    replace (ln (fh (S t) (traj fh xh0 t)) - ln (f (S t) (traj f x0 t)))
      with ((ln (fh (S t) (traj fh xh0 t)) - ln (f (S t) (traj fh xh0 t)))
            + (ln (f (S t) (traj fh xh0 t)) - ln (f (S t) (traj f x0 t)))) by ring.
    eapply Rle_trans; [apply Rabs_triang|].
    assert (tau (S t) * Rabs (ln (traj fh xh0 t) - ln (traj f x0 t))
            <= tau (S t) * seq_bound tau delta (Rabs (ln xh0 - ln x0)) t)
      by (apply Rmult_le_compat_l; assumption).
    lra.
Qed.

(** With τ_t ≤ τ < 1 and 0 ≤ δ_t ≤ δ the error stays below τ^t E_0 + δ/(1 − τ), whatever
    the length (docs/math.md §8 fact 4, item 5: "constant in n for the fold"). *)
Theorem sequential_uniform : forall (tau delta : nat -> R) E0 taumax dmax,
  0 <= E0 -> taumax < 1 ->
  (forall t, (0 < t)%nat -> 0 <= tau t <= taumax) ->
  (forall t, (0 < t)%nat -> 0 <= delta t <= dmax) ->
  forall t, 0 <= seq_bound tau delta E0 t <= taumax ^ t * E0 + dmax / (1 - taumax).
Proof.
  intros tau delta E0 taumax dmax HE0 Htm Htau Hdel t.
  induction t as [|t [IH0 IH1]]; simpl.
  - assert (0 <= dmax) by (destruct (Hdel 1%nat) as [H1 H2]; [lia|lra]).
    assert (0 <= dmax / (1 - taumax)) by (unfold Rdiv; apply Rmult_le_pos; [|left; apply Rinv_0_lt_compat]; lra).
    lra.
  - destruct (Htau (S t)) as [Ht0 Ht1]; [lia|]. destruct (Hdel (S t)) as [Hd0 Hd1]; [lia|].
    assert (0 <= tau (S t) * seq_bound tau delta E0 t) by (apply Rmult_le_pos; assumption).
    split; [lra|].
    assert (tau (S t) * seq_bound tau delta E0 t <= taumax * seq_bound tau delta E0 t)
      by (apply Rmult_le_compat_r; assumption).
    assert (taumax * seq_bound tau delta E0 t
            <= taumax * (taumax ^ t * E0 + dmax / (1 - taumax)))
      by (apply Rmult_le_compat_l; lra).
    replace (taumax * taumax ^ t * E0 + dmax / (1 - taumax))
      with (taumax * (taumax ^ t * E0 + dmax / (1 - taumax)) + dmax)
      by (field; lra).
    lra.
Qed.
