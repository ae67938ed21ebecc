(** * KLA's information mean: the absolute-error propagation of check/kla_bound.hpp and
    check/affine_bound.hpp (docs/error-model.md, "KLA: the information mean and y")

    The mean follows η_t = α_t η_{t−1} + ρ_t, ρ_t = v Λ k. The computed coefficient α̂_t is within
    e^{±a} of α_t ≥ 0 (the C++ takes a = D_t + 3η, D_t the log error den_t inherits from λ̂_{t−1}:
    AffineLogWeight.v); the roundings follow Higham's model with underflow of InnerProduct.v
    ([prod_ok]: x(1 + δ) + e, |δ| ≤ u, |e| ≤ η₀ for a product; [sum_ok]: s(1 + δ) for an addition).

    - The sequential step η̂_t = fl(fl(α̂_t η̂_{t−1}) + fl(fl(v Λ) k)): with c ≥ e^a(1 + u) − 1 (the
      C++'s c_t = expm1(D_t + 4η) for a = D_t + 3η) and γ₂ ≥ (1 + u)² − 1 (the C++'s 2u/(1 − 2u)),
        |η̂_t − η_t| ≤ α e + α c(|η_{t−1}| + e) + γ₂|ρ| + u(α(1 + c)(|η_{t−1}| + e) + (1 + γ₂)|ρ|)
                       + η₀(2 + (1 + u)(|k| + 1)),
      the C++'s e_t term for term ([kla_mean_step]), when u(1 + (1 + u)|k|) ≤ 1 (the addition's rounding of ρ̂'s
      underflow is then at most one η₀); without that hypothesis the same holds with
      η₀(1 + u)(2 + (1 + u)|k|) ([kla_mean_step_general]); since 2026-12-05 the C++ charges the larger
      of the two counts, with no condition on k ([kla_mean_step_cpp]). The whole recursion with that
      count, by induction ([kla_mean_sequential]).
    - The affine scans ([affine_tree_bound]): a node N = compose(L, E) computed as Â_N = fl(Â_L Â_E),
      R̂_N = fl(fl(Â_L R̂_E) + R̂_L) keeps dA ≥ |Â − A|, dR ≥ |R̂ − R|, R^abs ≥ |R| with
      check/affine_bound.hpp's `affine_error_monoid::compose` (its floors included), over any binary
      tree of composes (every scan schedule); the leaves' values ([affine_leaf_ok]) and the
      application to η₀ ([affine_apply_ok], `affine_apply_error`).
    - y = Σ_s q η_t/λ_t as the reference adds it, fl(y + fl(fl(q η̂)/λ̂)) from +0 ([kla_readout_y]): each
      term within |q|e/λ + t g + η₀(1 + (1 + g)/λ) of q η/λ, t = |q|(|η| + e)/λ, g ≥ expm1(E + 2η)
      ([readout_term]), the S additions within γ_S of the computed terms' sizes: check/kla_bound.hpp's
      y term for term plus γ_S Σ_s η₀(1 + (1 + g_s)/λ_s), the additions' rounding of the terms'
      underflow errors, which the C++ charges since 2026-12-05 (the underflow term times 1 + γ_S).

    Hypotheses the C++ states but this file takes as given: α̂ within e^{±(D + 3η)} (den's log error
    D from λ̂'s bound, AffineLogWeight.v, plus den's two roundings and the quotient's) and λ̂ within
    e^{±E} of λ (KlaStep.v, KlaScan.v, TreeLocal.v). *)

From Coq Require Import Reals Lra List.
From KalmanOracle Require Import FloatError Birkhoff InnerProduct.
Open Scope R_scope.

Section Mean.

Variable u eta0 : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis u_lt_1 : u < 1.
Hypothesis eta0_nonneg : 0 <= eta0.

(** ** The rounding of one operation against any exact value *)

(** One relative rounding x(1 + d), |d| ≤ u, against any exact value e: the step both roundings share. *)
Lemma scaled_err : forall x d e, Rabs d <= u ->
  Rabs (x * (1 + d) - e) <= Rabs (x - e) * (1 + u) + u * Rabs e.
Proof.
  intros x d e Hd.
  replace (x * (1 + d) - e) with ((x - e) * (1 + d) + e * d) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  rewrite !Rabs_mult.
  assert (Rabs (1 + d) <= 1 + u).
  { eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_R1. lra. }
  pose proof (Rabs_pos (x - e)). pose proof (Rabs_pos e). pose proof (Rabs_pos d).
  nra.
Qed.

Lemma prod_err : forall fl x e, prod_ok u eta0 fl x ->
  Rabs (fl x - e) <= Rabs (x - e) * (1 + u) + u * Rabs e + eta0.
Proof.
  intros fl x e [d [r [Hd [Hr Hfl]]]]. rewrite Hfl.
  replace (x * (1 + d) + r - e) with ((x * (1 + d) - e) + r) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  pose proof (scaled_err x d e Hd). lra.
Qed.

Lemma sum_err : forall fl x e, sum_ok u fl x ->
  Rabs (fl x - e) <= Rabs (x - e) * (1 + u) + u * Rabs e.
Proof.
  intros fl x e [d [Hd Hfl]]. rewrite Hfl. apply scaled_err, Hd.
Qed.

Lemma prod_size : forall fl x, prod_ok u eta0 fl x -> Rabs (fl x) <= Rabs x * (1 + u) + eta0.
Proof.
  intros fl x H. pose proof (prod_err fl x 0 H) as E.
  rewrite Rminus_0_r, Rminus_0_r, Rabs_R0 in E. lra.
Qed.

(** ** ρ̂ = fl(fl(v Λ) k): within γ₂|ρ| and η₀(1 + (1 + u)|k|) of ρ = v Λ k, its size within
    (1 + γ₂)|ρ| and the same *)

Lemma rho_error : forall fl v L k g2, (1 + u) * (1 + u) - 1 <= g2 ->
  prod_ok u eta0 fl (v * L) -> prod_ok u eta0 fl (fl (v * L) * k) ->
  Rabs (fl (fl (v * L) * k) - v * L * k) <= g2 * Rabs (v * L * k) + eta0 * (1 + (1 + u) * Rabs k).
Proof.
  intros fl v L k g2 Hg [d1 [r1 [Hd1 [Hr1 H1]]]] [d2 [r2 [Hd2 [Hr2 H2]]]].
  rewrite H2, H1.
  replace ((v * L * (1 + d1) + r1) * k * (1 + d2) + r2 - v * L * k)
    with (v * L * k * (d1 + d2 + d1 * d2) + r1 * k * (1 + d2) + r2) by ring.
  set (rho := v * L * k).
  eapply Rle_trans; [apply Rabs_triang|].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
  rewrite !Rabs_mult.
  assert (Hs : Rabs (d1 + d2 + d1 * d2) <= g2).
  { eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|]. rewrite Rabs_mult.
    pose proof (Rabs_pos d1). pose proof (Rabs_pos d2). nra. }
  assert (H1d : Rabs (1 + d2) <= 1 + u).
  { eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_R1. lra. }
  pose proof (Rabs_pos rho). pose proof (Rabs_pos r1). pose proof (Rabs_pos k).
  pose proof (Rabs_pos (1 + d2)).
  assert (Rabs rho * Rabs (d1 + d2 + d1 * d2) <= g2 * Rabs rho) by nra.
  assert (Hk : Rabs r1 * Rabs k <= eta0 * Rabs k) by (apply Rmult_le_compat_r; lra).
  assert (Rabs r1 * Rabs k * Rabs (1 + d2) <= eta0 * Rabs k * (1 + u)).
  { apply Rmult_le_compat; try lra. apply Rmult_le_pos; apply Rabs_pos. }
  nra.
Qed.

(** ** The sequential step *)

(** α̂ within e^{±a} of α ≥ 0, then rounded in a product: within c α of α when c ≥ e^a(1 + u) − 1. *)
Lemma coefficient_relative : forall al alh a c d, 0 <= al -> 0 <= a ->
  exp (- a) * al <= alh <= exp a * al -> exp a * (1 + u) - 1 <= c -> Rabs d <= u ->
  Rabs (alh * (1 + d) - al) <= c * al /\ 0 <= alh * (1 + d) <= (1 + c) * al.
Proof.
  intros al alh a c d Hal Ha [Hlo Hhi] Hc Hd. apply abs_le_elim in Hd.
  pose proof (exp_pos a) as Hpa. pose proof (exp_pos (- a)) as Hma.
  assert (Hinv : exp a * exp (- a) = 1) by (rewrite <- exp_plus; replace (a + - a) with 0 by ring; apply exp_0).
  assert (H1 : 1 <= exp a) by (pose proof (exp_ineq1_le a); lra).
  (* e^a(1 + u) + e^{−a}(1 − u) ≥ 2, since (e^a − 1)(1 − e^{−a}) ≥ 0 and e^a ≥ e^{−a} *)
  assert (H2 : exp (- a) <= 1) by nra.
  assert (Hsum : 2 <= exp a * (1 + u) + exp (- a) * (1 - u)).
  { assert (0 <= (exp a - 1) * (1 - exp (- a))) by (apply Rmult_le_pos; lra).
    assert (0 <= u * (exp a - exp (- a))) by (apply Rmult_le_pos; lra).
    nra. }
  assert (0 <= alh) by nra.
  assert (U1 : alh * (1 + d) <= alh * (1 + u)) by (apply Rmult_le_compat_l; lra).
  assert (U2 : alh * (1 + u) <= exp a * al * (1 + u)) by (apply Rmult_le_compat_r; lra).
  assert (U3 : exp a * al * (1 + u) <= (1 + c) * al).
  { replace (exp a * al * (1 + u)) with ((exp a * (1 + u)) * al) by ring.
    apply Rmult_le_compat_r; lra. }
  assert (L1 : alh * (1 - u) <= alh * (1 + d)) by (apply Rmult_le_compat_l; lra).
  assert (L2 : exp (- a) * al * (1 - u) <= alh * (1 - u)) by (apply Rmult_le_compat_r; lra).
  assert (L3 : (1 - c) * al <= exp (- a) * al * (1 - u)).
  { replace (exp (- a) * al * (1 - u)) with ((exp (- a) * (1 - u)) * al) by ring.
    apply Rmult_le_compat_r; lra. }
  assert (0 <= alh * (1 + d)) by (apply Rmult_le_pos; lra).
  split; [apply Rabs_le; split | split]; lra.
Qed.

(** The step in any model of the coefficient: α̂ within e^{±a} of α, c ≥ e^a(1 + u) − 1, γ₂ ≥ (1 + u)² − 1;
    the underflow terms exactly counted: η₀(1 + u)(2 + (1 + u)|k|). *)
Theorem kla_mean_step_general : forall fl al alh a c g2 x xh e v L k,
  0 <= al -> 0 <= a -> exp (- a) * al <= alh <= exp a * al -> exp a * (1 + u) - 1 <= c ->
  (1 + u) * (1 + u) - 1 <= g2 -> Rabs (xh - x) <= e ->
  prod_ok u eta0 fl (alh * xh) -> prod_ok u eta0 fl (v * L) -> prod_ok u eta0 fl (fl (v * L) * k) ->
  sum_ok u fl (fl (alh * xh) + fl (fl (v * L) * k)) ->
  Rabs (fl (fl (alh * xh) + fl (fl (v * L) * k)) - (al * x + v * L * k))
    <= al * e + al * c * (Rabs x + e) + g2 * Rabs (v * L * k)
       + u * (al * (1 + c) * (Rabs x + e) + (1 + g2) * Rabs (v * L * k))
       + eta0 * (1 + u) * (2 + (1 + u) * Rabs k).
Proof.
  intros fl al alh a c g2 x xh e v L k Hal Ha Halh Hc Hg He HP Hv Hk [d4 [Hd4 Hs]].
  pose proof (rho_error fl v L k g2 Hg Hv Hk) as ER.
  set (rho := v * L * k) in *. set (Rh := fl (fl (v * L) * k)) in *.
  destruct HP as [d1 [r1 [Hd1 [Hr1 HP]]]].
  set (P := fl (alh * xh)) in *.
  destruct (coefficient_relative al alh a c d1 Hal Ha Halh Hc Hd1) as [Hm [Hm0 Hm1]].
  set (m := alh * (1 + d1)) in *.
  assert (HPm : P = m * xh + r1) by (rewrite HP; unfold m; ring).
  assert (Hxh : Rabs xh <= Rabs x + e).
  { replace xh with ((xh - x) + x) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
  pose proof (Rabs_pos xh). pose proof (Rabs_pos x). pose proof (Rabs_pos rho).
  pose proof (Rabs_pos k). pose proof (Rabs_pos r1).
  (* the product: |P − αx| ≤ αe + αc(|x| + e) + η₀ and |P| ≤ α(1 + c)(|x| + e) + η₀ *)
  assert (EP : Rabs (P - al * x) <= al * e + al * c * (Rabs x + e) + eta0).
  { rewrite HPm. replace (m * xh + r1 - al * x) with ((m - al) * xh + al * (xh - x) + r1) by ring.
    eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
    rewrite !Rabs_mult, (Rabs_pos_eq al Hal).
    assert (Rabs (m - al) * Rabs xh <= c * al * (Rabs x + e)).
    { apply Rmult_le_compat; try lra; apply Rabs_pos. }
    assert (al * Rabs (xh - x) <= al * e) by (apply Rmult_le_compat_l; lra).
    lra. }
  assert (SP : Rabs P <= al * (1 + c) * (Rabs x + e) + eta0).
  { rewrite HPm. eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_mult, (Rabs_pos_eq m Hm0).
    assert (m * Rabs xh <= (1 + c) * al * (Rabs x + e)) by (apply Rmult_le_compat; lra).
    lra. }
  assert (SR : Rabs Rh <= (1 + g2) * Rabs rho + eta0 * (1 + (1 + u) * Rabs k)).
  { replace Rh with ((Rh - rho) + rho) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
  rewrite Hs.
  replace ((P + Rh) * (1 + d4) - (al * x + rho)) with ((P - al * x) + (Rh - rho) + (P + Rh) * d4) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
  rewrite Rabs_mult.
  assert (Rabs (P + Rh) <= Rabs P + Rabs Rh) by apply Rabs_triang.
  assert (Rabs (P + Rh) * Rabs d4 <= (Rabs P + Rabs Rh) * u).
  { apply Rmult_le_compat; try lra; apply Rabs_pos. }
  assert (Hfin : (Rabs P + Rabs Rh) * u <= u * (al * (1 + c) * (Rabs x + e) + (1 + g2) * Rabs rho)
                   + u * eta0 * (2 + (1 + u) * Rabs k)).
  { assert ((Rabs P + Rabs Rh) * u <= ((al * (1 + c) * (Rabs x + e) + eta0)
               + ((1 + g2) * Rabs rho + eta0 * (1 + (1 + u) * Rabs k))) * u)
      by (apply Rmult_le_compat_r; lra).
    lra. }
  lra.
Qed.

(** The C++'s underflow count η₀(2 + (1 + u)(|k| + 1)) covers the exact one when the addition's
    rounding of ρ̂'s underflow is at most one η₀: u(1 + (1 + u)|k|) ≤ 1. *)
Lemma underflow_count : forall k, u * (1 + (1 + u) * Rabs k) <= 1 ->
  eta0 * (1 + u) * (2 + (1 + u) * Rabs k) <= eta0 * (2 + (1 + u) * (Rabs k + 1)).
Proof.
  intros k Hk.
  assert (E : eta0 * (2 + (1 + u) * (Rabs k + 1)) - eta0 * (1 + u) * (2 + (1 + u) * Rabs k)
              = eta0 * (1 - u * (1 + (1 + u) * Rabs k))) by ring.
  assert (0 <= eta0 * (1 - u * (1 + (1 + u) * Rabs k))) by (apply Rmult_le_pos; lra).
  lra.
Qed.

(** e^{x + 3η}(1 + u) ≤ e^{x + 4η}: one more rounding is one more η (1 + u ≤ 1/(1 − u) = e^η). *)
Lemma one_more_eta : forall x, exp (x + 3 * eta u) * (1 + u) <= exp (x + 4 * eta u).
Proof.
  intros x.
  replace (x + 4 * eta u) with ((x + 3 * eta u) + eta u) by ring. rewrite (exp_plus (x + 3 * eta u) (eta u)).
  assert (E : exp (eta u) = / (1 - u)).
  { unfold eta. rewrite <- ln_Rinv by lra. apply exp_ln, Rinv_0_lt_compat. lra. }
  rewrite E. apply Rmult_le_compat_l; [left; apply exp_pos|].
  apply (Rmult_le_reg_r (1 - u)); [lra|]. rewrite Rinv_l by lra. nra.
Qed.

(** γ₂ = 2u/(1 − 2u) as the C++ evaluates it (delta_bound::gamma) covers two roundings. *)
Lemma gamma2_bound : 2 * u < 1 -> (1 + u) * (1 + u) - 1 <= 2 * u / (1 - 2 * u).
Proof.
  intros Hu. apply (Rmult_le_reg_r (1 - 2 * u)); [lra|].
  unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. nra.
Qed.

(** The step as check/kla_bound.hpp evaluates it: α̂ within e^{±(D + 3η)} of α (D ≥ 0 the log error
    den inherits from λ̂_{t−1}, affine_log_error), c ≥ expm1(D + 4η), γ₂ = 2u/(1 − 2u):
    e_t = α e + α c(|η_{t−1}| + e) + γ₂|ρ| + u(α(1 + c)(|η_{t−1}| + e) + (1 + γ₂)|ρ|)
          + η₀(2 + (1 + u)(|k| + 1)). *)
Theorem kla_mean_step : forall fl al alh D c x xh e v L k,
  0 <= al -> 0 <= D -> 2 * u < 1 -> u * (1 + (1 + u) * Rabs k) <= 1 ->
  exp (- (D + 3 * eta u)) * al <= alh <= exp (D + 3 * eta u) * al ->
  exp (D + 4 * eta u) - 1 <= c -> Rabs (xh - x) <= e ->
  prod_ok u eta0 fl (alh * xh) -> prod_ok u eta0 fl (v * L) -> prod_ok u eta0 fl (fl (v * L) * k) ->
  sum_ok u fl (fl (alh * xh) + fl (fl (v * L) * k)) ->
  Rabs (fl (fl (alh * xh) + fl (fl (v * L) * k)) - (al * x + v * L * k))
    <= al * e + al * c * (Rabs x + e) + 2 * u / (1 - 2 * u) * Rabs (v * L * k)
       + u * (al * (1 + c) * (Rabs x + e) + (1 + 2 * u / (1 - 2 * u)) * Rabs (v * L * k))
       + eta0 * (2 + (1 + u) * (Rabs k + 1)).
Proof.
  intros fl al alh D c x xh e v L k Hal HD Hu2 Hk Halh Hc He HP Hv Hrk Hs.
  assert (Ha : 0 <= D + 3 * eta u) by (pose proof (eta_nonneg u (conj u_nonneg u_lt_1)); lra).
  assert (Hc' : exp (D + 3 * eta u) * (1 + u) - 1 <= c) by (pose proof (one_more_eta D); lra).
  pose proof (kla_mean_step_general fl al alh (D + 3 * eta u) c (2 * u / (1 - 2 * u)) x xh e v L k
                Hal Ha Halh Hc' (gamma2_bound Hu2) He HP Hv Hrk Hs).
  pose proof (underflow_count k Hk). lra.
Qed.

(** The step as check/kla_bound.hpp evaluates it since 2026-12-05: the underflow count is the larger of
    the two above, so no condition on k: one of [kla_mean_step] and [kla_mean_step_general] covers it. *)
Definition cpp_underflow_count (k : R) : R :=
  Rmax (2 + (1 + u) * (Rabs k + 1)) ((1 + u) * (2 + (1 + u) * Rabs k)).

Theorem kla_mean_step_cpp : forall fl al alh D c x xh e v L k,
  0 <= al -> 0 <= D -> 2 * u < 1 ->
  exp (- (D + 3 * eta u)) * al <= alh <= exp (D + 3 * eta u) * al ->
  exp (D + 4 * eta u) - 1 <= c -> Rabs (xh - x) <= e ->
  prod_ok u eta0 fl (alh * xh) -> prod_ok u eta0 fl (v * L) -> prod_ok u eta0 fl (fl (v * L) * k) ->
  sum_ok u fl (fl (alh * xh) + fl (fl (v * L) * k)) ->
  Rabs (fl (fl (alh * xh) + fl (fl (v * L) * k)) - (al * x + v * L * k))
    <= al * e + al * c * (Rabs x + e) + (2 * u / (1 - 2 * u)) * Rabs (v * L * k)
       + u * (al * (1 + c) * (Rabs x + e) + (1 + 2 * u / (1 - 2 * u)) * Rabs (v * L * k))
       + eta0 * cpp_underflow_count k.
Proof.
  intros fl al alh D c x xh e v L k Hal HD Hu2 Halh Hc He HP Hv Hrk Hs.
  unfold cpp_underflow_count.
  destruct (Rle_dec (u * (1 + (1 + u) * Rabs k)) 1) as [Hk|Hk].
  - pose proof (kla_mean_step fl al alh D c x xh e v L k Hal HD Hu2 Hk Halh Hc He HP Hv Hrk Hs).
    pose proof (Rmax_l (2 + (1 + u) * (Rabs k + 1)) ((1 + u) * (2 + (1 + u) * Rabs k))).
    assert (eta0 * (2 + (1 + u) * (Rabs k + 1))
            <= eta0 * Rmax (2 + (1 + u) * (Rabs k + 1)) ((1 + u) * (2 + (1 + u) * Rabs k)))
      by (apply Rmult_le_compat_l; lra).
    lra.
  - assert (Ha : 0 <= D + 3 * eta u) by (pose proof (eta_nonneg u (conj u_nonneg u_lt_1)); lra).
    assert (Hc' : exp (D + 3 * eta u) * (1 + u) - 1 <= c) by (pose proof (one_more_eta D); lra).
    pose proof (kla_mean_step_general fl al alh (D + 3 * eta u) c (2 * u / (1 - 2 * u)) x xh e v L k
                  Hal Ha Halh Hc' (gamma2_bound Hu2) He HP Hv Hrk Hs).
    pose proof (Rmax_r (2 + (1 + u) * (Rabs k + 1)) ((1 + u) * (2 + (1 + u) * Rabs k))).
    assert (eta0 * ((1 + u) * (2 + (1 + u) * Rabs k))
            <= eta0 * Rmax (2 + (1 + u) * (Rabs k + 1)) ((1 + u) * (2 + (1 + u) * Rabs k)))
      by (apply Rmult_le_compat_l; lra).
    replace (eta0 * (1 + u) * (2 + (1 + u) * Rabs k)) with (eta0 * ((1 + u) * (2 + (1 + u) * Rabs k)))
      in * by ring.
    lra.
Qed.

(** ** The sequential recursion *)

(** One token's data: α, the computed α̂, D, c, v, Λ, k. *)
Record mstep := MStep { s_al : R; s_alh : R; s_D : R; s_c : R; s_v : R; s_L : R; s_k : R }.

Definition step_exact (s : mstep) (x : R) : R := s_al s * x + s_v s * s_L s * s_k s.

Definition step_computed (fl : R -> R) (s : mstep) (xh : R) : R :=
  fl (fl (s_alh s * xh) + fl (fl (s_v s * s_L s) * s_k s)).

(** check/kla_bound.hpp's e_t, along the exact η_{t−1} = x. *)
Definition step_bound (s : mstep) (x e : R) : R :=
  let al := s_al s in let c := s_c s in let g2 := 2 * u / (1 - 2 * u) in
  let rho := Rabs (s_v s * s_L s * s_k s) in
  al * e + al * c * (Rabs x + e) + g2 * rho + u * (al * (1 + c) * (Rabs x + e) + (1 + g2) * rho)
  + eta0 * cpp_underflow_count (s_k s).

(** The step's hypotheses and the model at its four roundings. *)
Definition step_ok (fl : R -> R) (s : mstep) (xh : R) : Prop :=
  0 <= s_al s /\ 0 <= s_D s /\
  exp (- (s_D s + 3 * eta u)) * s_al s <= s_alh s <= exp (s_D s + 3 * eta u) * s_al s /\
  exp (s_D s + 4 * eta u) - 1 <= s_c s /\
  prod_ok u eta0 fl (s_alh s * xh) /\ prod_ok u eta0 fl (s_v s * s_L s) /\
  prod_ok u eta0 fl (fl (s_v s * s_L s) * s_k s) /\
  sum_ok u fl (fl (s_alh s * xh) + fl (fl (s_v s * s_L s) * s_k s)).

Fixpoint mean_exact (x : R) (l : list mstep) : R :=
  match l with nil => x | s :: l' => mean_exact (step_exact s x) l' end.

Fixpoint mean_computed (fl : R -> R) (xh : R) (l : list mstep) : R :=
  match l with nil => xh | s :: l' => mean_computed fl (step_computed fl s xh) l' end.

Fixpoint mean_bound (x e : R) (l : list mstep) : R :=
  match l with nil => e | s :: l' => mean_bound (step_exact s x) (step_bound s x e) l' end.

Fixpoint mean_ok (fl : R -> R) (xh : R) (l : list mstep) : Prop :=
  match l with nil => True | s :: l' => step_ok fl s xh /\ mean_ok fl (step_computed fl s xh) l' end.

Lemma step_ok_bound : forall fl s x xh e, 2 * u < 1 -> step_ok fl s xh -> Rabs (xh - x) <= e ->
  Rabs (step_computed fl s xh - step_exact s x) <= step_bound s x e.
Proof.
  intros fl s x xh e Hu2 [Hal [HD [Halh [Hc [HP [Hv [Hrk Hs]]]]]]] He.
  unfold step_computed, step_exact, step_bound.
  exact (kla_mean_step_cpp fl (s_al s) (s_alh s) (s_D s) (s_c s) x xh e (s_v s) (s_L s) (s_k s)
           Hal HD Hu2 Halh Hc He HP Hv Hrk Hs).
Qed.

(** The whole recursion (the C++ starts from e = 0 at the exact η₀): every token's η̂_t, by taking
    the first t steps. *)
Theorem kla_mean_sequential : forall fl l x xh e, 2 * u < 1 -> Rabs (xh - x) <= e -> mean_ok fl xh l ->
  Rabs (mean_computed fl xh l - mean_exact x l) <= mean_bound x e l.
Proof.
  intros fl l. induction l as [|s l IH]; intros x xh e Hu2 He Hok; simpl; [exact He|].
  destruct Hok as [Hs Hl].
  apply IH; [exact Hu2 | apply step_ok_bound; assumption | exact Hl].
Qed.

(** ** The affine scans (check/affine_bound.hpp) *)

(** A node's bounds, as `affine_error`: A ≥ the exact A, R^abs ≥ |R|, dA ≥ |Â − A|, dR ≥ |R̂ − R|. *)
Record aerr := AErr { b_A : R; b_Rabs : R; b_dA : R; b_dR : R }.

Definition node_ok (b : aerr) (A R Ah Rh : R) : Prop :=
  0 <= A <= b_A b /\ Rabs R <= b_Rabs b /\ Rabs (Ah - A) <= b_dA b /\ Rabs (Rh - R) <= b_dR b.

(** `affine_error_monoid::compose(l, e)`, term for term; fA is `affine_floor`. *)
Definition aff_compose (fA : R) (l e : aerr) : aerr :=
  let A := Rmax (b_A l * b_A e) fA in
  let Rb := Rmax (b_A l * b_Rabs e + b_Rabs l)
                 (if Req_EM_T (b_Rabs e) 0 then (if Req_EM_T (b_Rabs l) 0 then 0 else fA) else fA) in
  let dA := (b_dA l * (b_A e + b_dA e) + b_A l * b_dA e) * (1 + u) + u * b_A l * b_A e + eta0 in
  let q := (b_dA l * (b_Rabs e + b_dR e) + b_A l * b_dR e) * (1 + u) + u * b_A l * b_Rabs e + eta0 in
  AErr A Rb dA ((q + b_dR l) * (1 + u) + u * Rb).

Lemma node_ok_nonneg : forall b A R Ah Rh, node_ok b A R Ah Rh ->
  0 <= b_A b /\ 0 <= b_Rabs b /\ 0 <= b_dA b /\ 0 <= b_dR b.
Proof.
  intros b A R Ah Rh [HA [HR [HdA HdR]]].
  pose proof (Rabs_pos R). pose proof (Rabs_pos (Ah - A)). pose proof (Rabs_pos (Rh - R)). lra.
Qed.

(** A product of two computed values against the exact one: for 0 ≤ x ≤ X, |x̂ − x| ≤ dX, |y| ≤ Y,
    |ŷ − y| ≤ dY, |x̂ŷ − xy| ≤ dX(Y + dY) + X dY (the compose's products, both of A and of R). *)
Lemma product_error : forall x xh X dX y yh Y dY,
  0 <= x <= X -> Rabs (xh - x) <= dX -> Rabs y <= Y -> Rabs (yh - y) <= dY ->
  Rabs (xh * yh - x * y) <= dX * (Y + dY) + X * dY.
Proof.
  intros x xh X dX y yh Y dY Hx HdX HY HdY.
  assert (Hyh : Rabs yh <= Y + dY).
  { replace yh with ((yh - y) + y) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
  replace (xh * yh - x * y) with ((xh - x) * yh + x * (yh - y)) by ring.
  eapply Rle_trans; [apply Rabs_triang|]. rewrite !Rabs_mult, (Rabs_pos_eq x) by lra.
  assert (Rabs (xh - x) * Rabs yh <= dX * (Y + dY)) by (apply Rmult_le_compat; try lra; apply Rabs_pos).
  assert (x * Rabs (yh - y) <= X * dY) by (apply Rmult_le_compat; try lra; apply Rabs_pos).
  lra.
Qed.

(** One compose N = compose(L, E) computed as Â_N = fl(Â_L Â_E), R̂_N = fl(fl(Â_L R̂_E) + R̂_L),
    against the exact (A_L A_E, A_L R_E + R_L). *)
Theorem affine_compose_ok : forall fl fA bl be AL RL AhL RhL AE RE AhE RhE,
  node_ok bl AL RL AhL RhL -> node_ok be AE RE AhE RhE ->
  prod_ok u eta0 fl (AhL * AhE) -> prod_ok u eta0 fl (AhL * RhE) ->
  sum_ok u fl (fl (AhL * RhE) + RhL) ->
  node_ok (aff_compose fA bl be) (AL * AE) (AL * RE + RL) (fl (AhL * AhE)) (fl (fl (AhL * RhE) + RhL)).
Proof.
  intros fl fA bl be AL RL AhL RhL AE RE AhE RhE Hl He HPA HPR HS.
  pose proof (node_ok_nonneg _ _ _ _ _ Hl) as [HbAl [HbRl [HdAl HdRl]]].
  pose proof (node_ok_nonneg _ _ _ _ _ He) as [HbAe [HbRe [HdAe HdRe]]].
  destruct Hl as [[HAl0 HAl] [HRl [HAhl HRhl]]]. destruct He as [[HAe0 HAe] [HRe [HAhe HRhe]]].
  unfold aff_compose, node_ok; simpl.
  set (Rb := Rmax (b_A bl * b_Rabs be + b_Rabs bl)
               (if Req_EM_T (b_Rabs be) 0 then (if Req_EM_T (b_Rabs bl) 0 then 0 else fA) else fA)).
  assert (HRb : b_A bl * b_Rabs be + b_Rabs bl <= Rb) by apply Rmax_l.
  pose proof (Rabs_pos RE).
  (* the exact R_N and its size *)
  assert (HRN : Rabs (AL * RE + RL) <= b_A bl * b_Rabs be + b_Rabs bl).
  { eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_mult, (Rabs_pos_eq AL HAl0).
    assert (AL * Rabs RE <= b_A bl * b_Rabs be) by (apply Rmult_le_compat; lra). lra. }
  (* |Â_L Â_E − A_L A_E| ≤ dA_L(A_E + dA_E) + A_L dA_E, |Â_L R̂_E − A_L R_E| ≤ dA_L(R^abs_E + dR_E) + A_L dR_E *)
  assert (HPAe : Rabs (AhL * AhE - AL * AE) <= b_dA bl * (b_A be + b_dA be) + b_A bl * b_dA be).
  { apply product_error; try lra. rewrite (Rabs_pos_eq AE HAe0). lra. }
  assert (HPRe : Rabs (AhL * RhE - AL * RE) <= b_dA bl * (b_Rabs be + b_dR be) + b_A bl * b_dR be)
    by (apply product_error; lra).
  assert (HALAE : AL * AE <= b_A bl * b_A be) by (apply Rmult_le_compat; lra).
  assert (HALRE : Rabs (AL * RE) <= b_A bl * b_Rabs be).
  { rewrite Rabs_mult, (Rabs_pos_eq AL HAl0). apply Rmult_le_compat; lra. }
  (* q ≥ |fl(Â_L R̂_E) − A_L R_E| *)
  pose proof (prod_err fl (AhL * RhE) (AL * RE) HPR) as Eq.
  set (q := (b_dA bl * (b_Rabs be + b_dR be) + b_A bl * b_dR be) * (1 + u) + u * b_A bl * b_Rabs be + eta0).
  assert (Hq : Rabs (fl (AhL * RhE) - AL * RE) <= q).
  { unfold q.
    assert (Rabs (AhL * RhE - AL * RE) * (1 + u)
            <= (b_dA bl * (b_Rabs be + b_dR be) + b_A bl * b_dR be) * (1 + u))
      by (apply Rmult_le_compat_r; lra).
    assert (u * Rabs (AL * RE) <= u * (b_A bl * b_Rabs be)) by (apply Rmult_le_compat_l; lra).
    lra. }
  split; [|split; [|split]].
  - split; [apply Rmult_le_pos; lra|]. eapply Rle_trans; [exact HALAE | apply Rmax_l].
  - lra.
  - pose proof (prod_err fl (AhL * AhE) (AL * AE) HPA) as E.
    rewrite (Rabs_pos_eq (AL * AE)) in E by (apply Rmult_le_pos; lra).
    assert (Rabs (AhL * AhE - AL * AE) * (1 + u)
            <= (b_dA bl * (b_A be + b_dA be) + b_A bl * b_dA be) * (1 + u))
      by (apply Rmult_le_compat_r; lra).
    assert (u * (AL * AE) <= u * (b_A bl * b_A be)) by (apply Rmult_le_compat_l; lra).
    lra.
  - pose proof (sum_err fl (fl (AhL * RhE) + RhL) (AL * RE + RL) HS) as E.
    replace (fl (AhL * RhE) + RhL - (AL * RE + RL)) with ((fl (AhL * RhE) - AL * RE) + (RhL - RL)) in E by ring.
    assert (Rabs ((fl (AhL * RhE) - AL * RE) + (RhL - RL)) <= q + b_dR bl).
    { eapply Rle_trans; [apply Rabs_triang|]. lra. }
    assert (Rabs ((fl (AhL * RhE) - AL * RE) + (RhL - RL)) * (1 + u) <= (q + b_dR bl) * (1 + u))
      by (apply Rmult_le_compat_r; lra).
    assert (u * Rabs (AL * RE + RL) <= u * Rb) by (apply Rmult_le_compat_l; lra).
    lra.
Qed.

(** Any binary tree of composes over leaves with their bounds: every scan schedule's prefix is such a
    tree (ANode later earlier). *)
Inductive atree : Type :=
  | ALeaf : aerr -> R -> R -> R -> R -> atree   (* bounds, exact A and R, computed Â and R̂ *)
  | ANode : atree -> atree -> atree.

Fixpoint t_A (t : atree) : R :=
  match t with ALeaf _ A _ _ _ => A | ANode l e => t_A l * t_A e end.
Fixpoint t_R (t : atree) : R :=
  match t with ALeaf _ _ R _ _ => R | ANode l e => t_A l * t_R e + t_R l end.
Fixpoint t_Ah (fl : R -> R) (t : atree) : R :=
  match t with ALeaf _ _ _ Ah _ => Ah | ANode l e => fl (t_Ah fl l * t_Ah fl e) end.
Fixpoint t_Rh (fl : R -> R) (t : atree) : R :=
  match t with ALeaf _ _ _ _ Rh => Rh | ANode l e => fl (fl (t_Ah fl l * t_Rh fl e) + t_Rh fl l) end.
Fixpoint t_bound (fA : R) (t : atree) : aerr :=
  match t with ALeaf b _ _ _ _ => b | ANode l e => aff_compose fA (t_bound fA l) (t_bound fA e) end.

(** The leaves' bounds hold and the model holds at every rounding of every compose. *)
Fixpoint t_ok (fl : R -> R) (t : atree) : Prop :=
  match t with
  | ALeaf b A R Ah Rh => node_ok b A R Ah Rh
  | ANode l e => t_ok fl l /\ t_ok fl e /\ prod_ok u eta0 fl (t_Ah fl l * t_Ah fl e) /\
                 prod_ok u eta0 fl (t_Ah fl l * t_Rh fl e) /\
                 sum_ok u fl (fl (t_Ah fl l * t_Rh fl e) + t_Rh fl l)
  end.

Theorem affine_tree_bound : forall fl fA t, t_ok fl t ->
  node_ok (t_bound fA t) (t_A t) (t_R t) (t_Ah fl t) (t_Rh fl t).
Proof.
  intros fl fA t. induction t as [b A R Ah Rh|l IHl e IHe]; simpl; [tauto|].
  intros [Hl [He [HPA [HPR HS]]]].
  apply affine_compose_ok; auto.
Qed.

(** A leaf as check/kla_bound.hpp forms it: α̂ within e^{±a} of α (a = D + 3η), ρ̂ = fl(fl(v Λ) k);
    A ≥ α, R^abs ≥ |ρ|, dA ≥ α expm1(a) + η₀, dR ≥ γ₂|ρ| + η₀(1 + (1 + u)|k|). *)
Theorem affine_leaf_ok : forall fl b al alh a v L k, 0 <= al -> 0 <= a -> 2 * u < 1 ->
  exp (- a) * al <= alh <= exp a * al ->
  al <= b_A b -> Rabs (v * L * k) <= b_Rabs b -> al * (exp a - 1) + eta0 <= b_dA b ->
  2 * u / (1 - 2 * u) * Rabs (v * L * k) + eta0 * (1 + (1 + u) * Rabs k) <= b_dR b ->
  prod_ok u eta0 fl (v * L) -> prod_ok u eta0 fl (fl (v * L) * k) ->
  node_ok b al (v * L * k) alh (fl (fl (v * L) * k)).
Proof.
  intros fl b al alh a v L k Hal Ha Hu2 [Hlo Hhi] HA HR HdA HdR Hv Hk.
  pose proof (exp_pos a). pose proof (exp_pos (- a)).
  assert (Hinv : exp a * exp (- a) = 1) by (rewrite <- exp_plus; replace (a + - a) with 0 by ring; apply exp_0).
  assert (H1 : 1 <= exp a) by (pose proof (exp_ineq1_le a); lra).
  assert (H2 : exp (- a) <= 1) by nra.
  assert (Hs : 2 <= exp a + exp (- a)).
  { assert (0 <= (exp a - 1) * (1 - exp (- a))) by (apply Rmult_le_pos; lra). nra. }
  split; [lra | split; [lra | split]].
  - assert (al * (1 - exp (- a)) <= al * (exp a - 1)) by (apply Rmult_le_compat_l; lra).
    apply Rabs_le. split; nra.
  - pose proof (rho_error fl v L k _ (gamma2_bound Hu2) Hv Hk). lra.
Qed.

(** `affine_apply_error`: the prefix (Â, R̂) applied to x₀, fl(fl(Â x₀) + R̂), against A x₀ + R, for
    x0a ≥ |x₀|; the product is charged nothing when x0a = 0 (an exact zero product is not rounded). *)
Definition apply_bound (b : aerr) (x0a : R) : R :=
  let product := if Req_EM_T x0a 0 then 0 else b_dA b * x0a * (1 + u) + u * b_A b * x0a + eta0 in
  (product + b_dR b) * (1 + u) + u * (b_A b * x0a + b_Rabs b).

Theorem affine_apply_ok : forall fl b A R Ah Rh x0 x0a, node_ok b A R Ah Rh -> Rabs x0 <= x0a ->
  prod_ok u eta0 fl (Ah * x0) -> (x0 = 0 -> fl (Ah * x0) = 0) -> sum_ok u fl (fl (Ah * x0) + Rh) ->
  Rabs (fl (fl (Ah * x0) + Rh) - (A * x0 + R)) <= apply_bound b x0a.
Proof.
  intros fl b A R Ah Rh x0 x0a Hb Hx HP Hz HS.
  pose proof (node_ok_nonneg _ _ _ _ _ Hb) as [HbA [HbR [HdA HdR]]].
  destruct Hb as [[HA0 HA] [HR [HAh HRh]]].
  pose proof (Rabs_pos x0).
  set (product := if Req_EM_T x0a 0 then 0 else b_dA b * x0a * (1 + u) + u * b_A b * x0a + eta0).
  assert (Hprod : Rabs (fl (Ah * x0) - A * x0) <= product).
  { unfold product. destruct (Req_EM_T x0a 0) as [E|E].
    - assert (x0 = 0).
      { destruct (Req_dec x0 0) as [Z|Z]; [exact Z|]. pose proof (Rabs_pos_lt x0 Z). lra. }
      subst x0.
      rewrite (Hz eq_refl), Rmult_0_r, Rminus_0_r, Rabs_R0. lra.
    - pose proof (prod_err fl (Ah * x0) (A * x0) HP) as P.
      replace (Ah * x0 - A * x0) with ((Ah - A) * x0) in P by ring.
      rewrite !Rabs_mult, (Rabs_pos_eq A HA0) in P.
      assert (Rabs (Ah - A) * Rabs x0 * (1 + u) <= b_dA b * x0a * (1 + u)).
      { apply Rmult_le_compat_r; [lra|]. apply Rmult_le_compat; try lra; apply Rabs_pos. }
      assert (u * (A * Rabs x0) <= u * (b_A b * x0a)).
      { apply Rmult_le_compat_l; [lra|]. apply Rmult_le_compat; lra. }
      lra. }
  assert (0 <= product) by (pose proof (Rabs_pos (fl (Ah * x0) - A * x0)); lra).
  pose proof (sum_err fl (fl (Ah * x0) + Rh) (A * x0 + R) HS) as E.
  replace (fl (Ah * x0) + Rh - (A * x0 + R)) with ((fl (Ah * x0) - A * x0) + (Rh - R)) in E by ring.
  assert (Rabs ((fl (Ah * x0) - A * x0) + (Rh - R)) <= product + b_dR b).
  { eapply Rle_trans; [apply Rabs_triang|]. lra. }
  assert (Rabs ((fl (Ah * x0) - A * x0) + (Rh - R)) * (1 + u) <= (product + b_dR b) * (1 + u))
    by (apply Rmult_le_compat_r; lra).
  assert (Rabs (A * x0 + R) <= b_A b * x0a + b_Rabs b).
  { eapply Rle_trans; [apply Rabs_triang|]. rewrite Rabs_mult, (Rabs_pos_eq A HA0).
    assert (A * Rabs x0 <= b_A b * x0a) by (apply Rmult_le_compat; lra). lra. }
  assert (u * Rabs (A * x0 + R) <= u * (b_A b * x0a + b_Rabs b)) by (apply Rmult_le_compat_l; lra).
  unfold apply_bound. fold product. lra.
Qed.

(** ** y = Σ_s q η_t/λ_t (check/kla_bound.hpp's `y`; the reference adds fl(fl(q η̂)/λ̂) from +0) *)

(** One term: λ̂ within e^{±E} of λ > 0, |η̂ − η| ≤ e, g ≥ expm1(E + 2η) (`grow`):
    |t̂ − t| ≤ |q|e/λ + |q|(|η| + e)/λ · g + η₀(1 + (1 + g)/λ), and |t̂| ≤ |q|(|η| + e)/λ · (1 + g)
    + η₀(1 + (1 + g)/λ). *)
Theorem readout_term : forall fl q x xh e lam lamh E g,
  0 < lam -> 0 <= E -> exp (- E) * lam <= lamh <= exp E * lam -> exp (E + 2 * eta u) - 1 <= g ->
  Rabs (xh - x) <= e ->
  prod_ok u eta0 fl (q * xh) -> prod_ok u eta0 fl (fl (q * xh) / lamh) ->
  Rabs (fl (fl (q * xh) / lamh) - q * x / lam)
    <= Rabs q * e / lam + Rabs q * (Rabs x + e) / lam * g + eta0 * (1 + (1 + g) / lam) /\
  Rabs (fl (fl (q * xh) / lamh))
    <= Rabs q * (Rabs x + e) / lam * (1 + g) + eta0 * (1 + (1 + g) / lam).
Proof.
  intros fl q x xh e lam lamh E g Hlam HE [Hlo Hhi] Hg He [d1 [r1 [Hd1 [Hr1 H1]]]] [d2 [r2 [Hd2 [Hr2 H2]]]].
  rewrite H2, H1. apply abs_le_elim in Hd1. apply abs_le_elim in Hd2.
  pose proof (exp_pos E) as HpE. pose proof (exp_pos (- E)) as HmE.
  assert (Hinv : exp E * exp (- E) = 1) by (rewrite <- exp_plus; replace (E + - E) with 0 by ring; apply exp_0).
  assert (Hlamh : 0 < lamh) by nra.
  (* e^{E + 2η} = e^E/(1 − u)² *)
  assert (Heta : exp (E + 2 * eta u) = exp E * (/ (1 - u) * / (1 - u))).
  { unfold eta. rewrite exp_plus. f_equal.
    replace (2 * - ln (1 - u)) with (- ln (1 - u) + - ln (1 - u)) by ring.
    rewrite exp_plus, exp_Ropp, exp_ln by lra. reflexivity. }
  set (ia := / (1 - u)) in *.
  assert (Hia : (1 - u) * ia = 1) by (unfold ia; field; lra).
  assert (Hia1 : 1 + u <= ia) by (unfold ia; apply (Rmult_le_reg_r (1 - u)); [lra|]; rewrite Rinv_l by lra; nra).
  set (m := (1 + d1) * (1 + d2) * (lam / lamh)).
  (* m ∈ [e^{−(E + 2η)}, e^{E + 2η}], so |m − 1| ≤ g *)
  assert (Hr : exp (- E) <= lam / lamh <= exp E).
  { split.
    - apply (Rmult_le_reg_r lamh); [lra|]. unfold Rdiv. rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra. nra.
    - apply (Rmult_le_reg_r lamh); [lra|]. unfold Rdiv. rewrite Rmult_assoc, Rinv_l, Rmult_1_r by lra. nra. }
  assert (Hp : (1 - u) * (1 - u) <= (1 + d1) * (1 + d2) <= (1 + u) * (1 + u)) by (split; nra).
  assert (Hm_hi : m <= exp E * ((1 + u) * (1 + u))).
  { unfold m. rewrite Rmult_comm. apply Rmult_le_compat; try lra; nra. }
  assert (Hm_lo : exp (- E) * ((1 - u) * (1 - u)) <= m).
  { unfold m. rewrite (Rmult_comm ((1 + d1) * (1 + d2))). apply Rmult_le_compat; try lra; nra. }
  assert (Hup : exp E * ((1 + u) * (1 + u)) <= 1 + g).
  { assert ((1 + u) * (1 + u) <= ia * ia) by (apply Rmult_le_compat; lra). nra. }
  assert (Hdown : 1 - g <= exp (- E) * ((1 - u) * (1 - u))).
  { (* e^{−x} + e^{x} ≥ 2 with e^x = e^E ia², e^{−x} = e^{−E}(1 − u)² *)
    set (X := exp E * (ia * ia)). set (Y := exp (- E) * ((1 - u) * (1 - u))).
    assert (HXY : X * Y = 1).
    { unfold X, Y. replace (exp E * (ia * ia) * (exp (- E) * ((1 - u) * (1 - u))))
        with ((exp E * exp (- E)) * (((1 - u) * ia) * ((1 - u) * ia))) by ring.
      rewrite Hinv, Hia. ring. }
    assert (HY : 0 < Y) by (unfold Y; apply Rmult_lt_0_compat; [lra | nra]).
    assert (HX : 0 < X) by (unfold X; apply Rmult_lt_0_compat; [lra | nra]).
    assert (Hsq : 4 <= (X + Y) * (X + Y)) by (pose proof (pow2_ge_0 (X - Y)); nra).
    assert (2 <= X + Y) by nra.
    unfold X in *. lra. }
  assert (Hm1 : Rabs (m - 1) <= g) by (apply Rabs_le; lra).
  assert (Hmpos : 0 < exp (- E) * ((1 - u) * (1 - u))) by (apply Rmult_lt_0_compat; nra).
  assert (Hm0 : Rabs m <= 1 + g) by (rewrite Rabs_pos_eq by lra; lra).
  (* the underflow of the product, divided and rounded *)
  assert (Hu1 : Rabs (r1 / lamh * (1 + d2)) <= eta0 * (1 + g) / lam).
  { unfold Rdiv. rewrite !Rabs_mult, (Rabs_pos_eq (/ lamh)) by (left; apply Rinv_0_lt_compat; lra).
    rewrite (Rabs_pos_eq (1 + d2)) by lra.
    assert (Hil : / lamh <= exp E * / lam).
    { apply (Rmult_le_reg_l lamh); [lra|]. rewrite Rinv_r by lra.
      apply (Rmult_le_reg_r lam); [lra|]. rewrite Rmult_1_l.
      replace (lamh * (exp E * / lam) * lam) with (lamh * exp E) by (field; lra).
      assert (Hm : exp E * (exp (- E) * lam) <= exp E * lamh) by (apply Rmult_le_compat_l; lra).
      replace (exp E * (exp (- E) * lam)) with ((exp E * exp (- E)) * lam) in Hm by ring.
      rewrite Hinv in Hm. lra. }
    assert (0 < / lamh) by (apply Rinv_0_lt_compat; lra).
    assert (0 < / lam) by (apply Rinv_0_lt_compat; lra).
    pose proof (Rabs_pos r1).
    assert (Rabs r1 * / lamh * (1 + d2) <= eta0 * (exp E * / lam) * (1 + u)).
    { apply Rmult_le_compat; try lra; [apply Rmult_le_pos; lra|]. apply Rmult_le_compat; lra. }
    assert (exp E * (1 + u) <= 1 + g).
    { assert (exp E * (1 + u) <= exp E * ((1 + u) * (1 + u))) by (apply Rmult_le_compat_l; nra). lra. }
    assert (eta0 * (exp E * / lam) * (1 + u) <= eta0 * (1 + g) * / lam).
    { replace (eta0 * (exp E * / lam) * (1 + u)) with (eta0 * (exp E * (1 + u)) * / lam) by ring.
      apply Rmult_le_compat_r; [lra|]. apply Rmult_le_compat_l; lra. }
    lra. }
  assert (Hsplit : (q * xh * (1 + d1) + r1) / lamh * (1 + d2) + r2
                   = q * xh * m / lam + r1 / lamh * (1 + d2) + r2).
  { unfold m. field. lra. }
  rewrite Hsplit.
  assert (Hxh : Rabs xh <= Rabs x + e).
  { replace xh with ((xh - x) + x) by ring. eapply Rle_trans; [apply Rabs_triang|]. lra. }
  pose proof (Rabs_pos q). pose proof (Rabs_pos xh). pose proof (Rabs_pos (xh - x)).
  pose proof (Rabs_pos (m - 1)). pose proof (Rabs_pos r2).
  assert (Hil : 0 < / lam) by (apply Rinv_0_lt_compat; lra).
  replace (eta0 * (1 + (1 + g) / lam)) with (eta0 * (1 + g) / lam + eta0) by (field; lra).
  set (U := r1 / lamh * (1 + d2)) in *.
  split.
  - replace (q * xh * m / lam + U + r2 - q * x / lam)
      with (q * (xh - x) / lam + q * xh * (m - 1) / lam + (U + r2)) by (unfold U; field; lra).
    eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_l, Rabs_triang|].
    unfold Rdiv. rewrite !Rabs_mult, (Rabs_pos_eq (/ lam)) by lra. unfold Rdiv in Hu1.
    assert (Rabs q * Rabs (xh - x) * / lam <= Rabs q * e * / lam).
    { apply Rmult_le_compat_r; [lra|]. apply Rmult_le_compat_l; lra. }
    assert (Rabs q * Rabs xh * Rabs (m - 1) * / lam <= Rabs q * (Rabs x + e) * / lam * g).
    { replace (Rabs q * (Rabs x + e) * / lam * g) with (Rabs q * (Rabs x + e) * g * / lam) by ring.
      apply Rmult_le_compat_r; [lra|]. apply Rmult_le_compat; try lra; [apply Rmult_le_pos; lra|].
      apply Rmult_le_compat_l; lra. }
    lra.
  - eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
    unfold Rdiv. rewrite !Rabs_mult, (Rabs_pos_eq (/ lam)) by lra. unfold Rdiv in Hu1.
    assert (Rabs q * Rabs xh * Rabs m * / lam <= Rabs q * (Rabs x + e) * / lam * (1 + g)).
    { replace (Rabs q * (Rabs x + e) * / lam * (1 + g)) with (Rabs q * (Rabs x + e) * (1 + g) * / lam) by ring.
      apply Rmult_le_compat_r; [lra|].
      assert (Rabs q * Rabs xh <= Rabs q * (Rabs x + e)) by (apply Rmult_le_compat_l; lra).
      assert (0 <= Rabs q * Rabs xh) by (apply Rmult_le_pos; lra).
      pose proof (Rabs_pos m).
      apply Rmult_le_compat; lra. }
    lra.
Qed.

(** The S terms, each as the reference computes it. *)
Record yterm := YTerm { y_q : R; y_x : R; y_xh : R; y_e : R; y_lam : R; y_lamh : R; y_E : R; y_g : R }.

Definition term_hat (fl : R -> R) (r : yterm) : R := fl (fl (y_q r * y_xh r) / y_lamh r).
Definition term_exact (r : yterm) : R := y_q r * y_x r / y_lam r.
Definition term_size (r : yterm) : R := Rabs (y_q r) * (Rabs (y_x r) + y_e r) / y_lam r.
Definition term_under (r : yterm) : R := eta0 * (1 + (1 + y_g r) / y_lam r).

Definition term_ok (fl : R -> R) (r : yterm) : Prop :=
  0 < y_lam r /\ 0 <= y_E r /\ exp (- y_E r) * y_lam r <= y_lamh r <= exp (y_E r) * y_lam r /\
  exp (y_E r + 2 * eta u) - 1 <= y_g r /\ Rabs (y_xh r - y_x r) <= y_e r /\
  prod_ok u eta0 fl (y_q r * y_xh r) /\ prod_ok u eta0 fl (fl (y_q r * y_xh r) / y_lamh r).

(** y ← fl(y + t̂), from an initial value (+0 in the reference). *)
Fixpoint sum_from (fl : R -> R) (acc : R) (l : list yterm) : R :=
  match l with nil => acc | r :: l' => sum_from fl (fl (acc + term_hat fl r)) l' end.

Fixpoint y_ok (fl : R -> R) (acc : R) (l : list yterm) : Prop :=
  match l with
  | nil => True
  | r :: l' => term_ok fl r /\ sum_ok u fl (acc + term_hat fl r) /\ y_ok fl (fl (acc + term_hat fl r)) l'
  end.

Fixpoint sum_exact (l : list yterm) : R := match l with nil => 0 | r :: l' => term_exact r + sum_exact l' end.
Fixpoint sum_hat (fl : R -> R) (l : list yterm) : R :=
  match l with nil => 0 | r :: l' => term_hat fl r + sum_hat fl l' end.
Fixpoint abs_hat (fl : R -> R) (l : list yterm) : R :=
  match l with nil => 0 | r :: l' => Rabs (term_hat fl r) + abs_hat fl l' end.
Fixpoint size_bound (l : list yterm) : R :=
  match l with nil => 0 | r :: l' => term_size r * (1 + y_g r) + term_under r + size_bound l' end.
Fixpoint under_sum (l : list yterm) : R :=
  match l with nil => 0 | r :: l' => term_under r + under_sum l' end.

(** check/kla_bound.hpp's y, term for term: Σ_s |q|e/λ + ts·grow + γ_S ts(1 + grow) + η₀(1 + (1 + grow)/λ). *)
Fixpoint cpp_y (gS : R) (l : list yterm) : R :=
  match l with
  | nil => 0
  | r :: l' => Rabs (y_q r) * y_e r / y_lam r + term_size r * y_g r + gS * term_size r * (1 + y_g r)
               + eta0 * (1 + (1 + y_g r) / y_lam r) + cpp_y gS l'
  end.

(** The additions: |ŷ − (A + Σ t̂)| ≤ ((1 + u)^(k + n) − 1)(B + Σ|t̂|) from |acc − A| ≤ ((1 + u)^k − 1)B, |A| ≤ B. *)
Lemma sum_from_error : forall fl l acc A B k, y_ok fl acc l ->
  Rabs (acc - A) <= ((1 + u) ^ k - 1) * B -> Rabs A <= B ->
  Rabs (sum_from fl acc l - (A + sum_hat fl l)) <= ((1 + u) ^ (k + length l) - 1) * (B + abs_hat fl l).
Proof.
  intros fl l. induction l as [|r l IH]; intros acc A B k Hok Hacc HA; simpl.
  - rewrite Nat.add_0_r, !Rplus_0_r. exact Hacc.
  - destruct Hok as [_ [Hs Hl]].
    set (t := term_hat fl r) in *.
    rewrite Nat.add_succ_r.
    replace (A + (t + sum_hat fl l)) with ((A + t) + sum_hat fl l) by ring.
    replace (B + (Rabs t + abs_hat fl l)) with ((B + Rabs t) + abs_hat fl l) by ring.
    replace (S (k + length l)) with (S k + length l)%nat by reflexivity.
    apply IH; [exact Hl | |].
    + pose proof (sum_err fl (acc + t) (A + t) Hs) as E.
      replace (acc + t - (A + t)) with (acc - A) in E by ring.
      pose proof (pow_1pu_ge_1 u u_nonneg k) as Hk.
      assert (Hab : Rabs (A + t) <= B + Rabs t) by (eapply Rle_trans; [apply Rabs_triang | lra]).
      pose proof (Rabs_pos t). pose proof (Rabs_pos A).
      assert (Rabs (acc - A) * (1 + u) <= ((1 + u) ^ k - 1) * B * (1 + u)) by (apply Rmult_le_compat_r; lra).
      assert (u * Rabs (A + t) <= u * (B + Rabs t)) by (apply Rmult_le_compat_l; lra).
      assert (u * Rabs t <= ((1 + u) ^ S k - 1) * Rabs t).
      { apply Rmult_le_compat_r; [lra|]. simpl. nra. }
      replace (((1 + u) ^ S k - 1) * (B + Rabs t)) with (((1 + u) ^ k - 1) * B * (1 + u) + u * B + ((1 + u) ^ S k - 1) * Rabs t)
        by (simpl; ring).
      lra.
    + eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma sum_hat_error : forall fl l acc, y_ok fl acc l ->
  Rabs (sum_hat fl l - sum_exact l) <= cpp_y 0 l /\ abs_hat fl l <= size_bound l.
Proof.
  intros fl l. induction l as [|r l IH]; intros acc Hok; simpl.
  - rewrite Rminus_0_r, Rabs_R0. lra.
  - destruct Hok as [[Hlam [HE [Hlh [Hg [He [HP1 HP2]]]]]] [_ Hl]].
    destruct (IH _ Hl) as [IH1 IH2].
    destruct (readout_term fl (y_q r) (y_x r) (y_xh r) (y_e r) (y_lam r) (y_lamh r) (y_E r) (y_g r)
                Hlam HE Hlh Hg He HP1 HP2) as [T1 T2].
    fold (term_hat fl r) in T1, T2. fold (term_exact r) in T1.
    unfold term_size, term_under.
    split.
    + replace (term_hat fl r + sum_hat fl l - (term_exact r + sum_exact l))
        with ((term_hat fl r - term_exact r) + (sum_hat fl l - sum_exact l)) by ring.
      eapply Rle_trans; [apply Rabs_triang|]. rewrite !Rmult_0_l. lra.
    + pose proof (Rabs_triang (term_hat fl r) 0). lra.
Qed.

(** **y as the reference computes it** (S terms added to +0 in order): the C++'s bound plus
    γ_S Σ_s η₀(1 + (1 + g_s)/λ_s), the additions' rounding of the terms' underflow, which
    check/kla_bound.hpp charges since 2026-12-05 (before, it did not). *)
Theorem kla_readout_y : forall fl l, INR (length l) * u < 1 -> y_ok fl 0 l ->
  let gS := INR (length l) * u / (1 - INR (length l) * u) in
  Rabs (sum_from fl 0 l - sum_exact l) <= cpp_y gS l + gS * under_sum l.
Proof.
  intros fl l Hn Hok gS.
  pose proof (sum_from_error fl l 0 0 0 0%nat Hok) as Hsum.
  assert (H0 : Rabs (0 - 0) <= ((1 + u) ^ 0 - 1) * 0) by (rewrite Rminus_0_r, Rabs_R0; lra).
  assert (H0' : Rabs 0 <= 0) by (rewrite Rabs_R0; lra).
  specialize (Hsum H0 H0').
  replace (0 + length l)%nat with (length l) in Hsum by reflexivity.
  replace (0 + abs_hat fl l) with (abs_hat fl l) in Hsum by ring.
  destruct (sum_hat_error fl l 0 Hok) as [Hh Habs].
  pose proof (pow_le_gamma u u_nonneg (length l) Hn) as Hg. fold gS in Hg.
  assert (Hgs : 0 <= gS).
  { unfold gS. apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | lra] |].
    left. apply Rinv_0_lt_compat. lra. }
  assert (Habs0 : 0 <= abs_hat fl l).
  { clear. induction l as [|r l IH]; simpl; [lra|]. pose proof (Rabs_pos (term_hat fl r)). lra. }
  assert (Hpw : ((1 + u) ^ length l - 1) * abs_hat fl l <= gS * size_bound l).
  { pose proof (pow_1pu_ge_1 u u_nonneg (length l)). apply Rmult_le_compat; lra. }
  (* cpp_y gS l = cpp_y 0 l + gS Σ ts(1 + g) and size_bound = Σ ts(1 + g) + under_sum *)
  assert (Hsplit : forall g, cpp_y g l = cpp_y 0 l + g * (size_bound l - under_sum l)).
  { clear. intros g. induction l as [|r l IH]; simpl; [ring|]. rewrite IH. ring. }
  rewrite (Hsplit gS).
  replace (sum_from fl 0 l - sum_exact l) with ((sum_from fl 0 l - sum_hat fl l) + (sum_hat fl l - sum_exact l)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  replace (sum_from fl 0 l - sum_hat fl l) with (sum_from fl 0 l - (0 + sum_hat fl l)) by ring.
  lra.
Qed.

End Mean.
