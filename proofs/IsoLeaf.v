(** * The isotropic KDN's covariance leaf formed in floating point (docs/error-model.md, "Isotropic
    KDN"; check/isotropic_kdn_bound.hpp's "leaf" count)

    One head's covariance scan composes the leaves [[a, ω], [u a, 1 + u ω]], a = mean_i α_i²,
    u = μ ‖k‖² / (K r) (docs/math.md §5; algebra/leaves.hpp, iso_kdn_covariance_leaf). The reference
    forms them from Â = Σ_i fl(α̂_i α̂_i) and N̂ = Σ_i fl(k_i k_i) (K-term sums from +0; α̂ = e^g within
    2 roundings, as KdnStep.v and KdnLeaf.v assume) as

        â = fl(Â / K),   û = fl(fl(μ N̂) / fl(K r)),   [[â, ω], [fl(û â), fl(1 + fl(û ω))]].

    In FloatError.v's model, in log ([rel], KlaStep.v): Â within (K + 4)η ([decay_sum_rel], any
    summation order), N̂ within Kη (KdnGain.key_norm_rel), â within K + 5, û within K + 3, û â within
    2K + 9, 1 + û ω within K + 5 ([iso_leaf_fl_rel]); so every entry within e^{±(2K + 9)η} and the
    leaf's action within 2(2K + 9)η ([iso_leaf_action]): the count the C++ charges an isotropic leaf. *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep PositiveSum.
Import ListNotations.
Open Scope R_scope.

Section IsoLeaf.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.
Local Notation computed_sum := (PositiveSum.computed_sum fl).

(** fl(α̂ α̂) within 5η of α², α̂ within 2η of α. *)
Lemma decay_square_rel : forall alpha alpha_hat, rel (2 * eta u) alpha alpha_hat ->
  rel (5 * eta u) (alpha * alpha) (fl (alpha_hat * alpha_hat)).
Proof.
  intros alpha alpha_hat Ha.
  eapply rel_mono; [|apply round, rel_mul; [exact Ha | exact Ha]]. lra.
Qed.

(** Â = Σ_i fl(α̂_i α̂_i), K terms by any tree: within (K + 4)η. *)
Theorem decay_sum_rel : forall (T : sum_tree) K, leaf_count T = K -> (1 <= K)%nat ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists alpha alpha_hat, rel (2 * eta u) alpha alpha_hat /\ t = alpha * alpha /\
       c = fl (alpha_hat * alpha_hat) /\ k = 5 * eta u) ->
  rel ((INR K + 4) * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros T K HK HK1 Hterms.
  pose proof (eta_nonneg u u_bounds) as He.
  eapply rel_mono; [|refine (uniform_sum_rel_terms u u_bounds fl fl_everywhere _ (5 * eta u) T K _ Hterms HK)].
  - rewrite minus_INR by lia. simpl (INR 1). lra.
  - intros t c k [alpha [alpha_hat [Ha [-> [-> ->]]]]].
    split; [nra | split; [lra | split; [lra | apply decay_square_rel; exact Ha]]].
Qed.

(** The leaf's four entries, exact and as the reference computes them from Â and N̂ (Kr = K). *)
Definition iso_leaf_entries (A N mu r omega Kr : R) : R * R * R * R :=
  let a := A / Kr in let inf := mu * N / (Kr * r) in (a, omega, inf * a, 1 + inf * omega).

Definition iso_leaf_entries_fl (A_hat N_hat mu r omega Kr : R) : R * R * R * R :=
  let a := fl (A_hat / Kr) in let inf := fl (fl (mu * N_hat) / fl (Kr * r)) in
  (a, omega, fl (inf * a), fl (1 + fl (inf * omega))).

Theorem iso_leaf_fl_rel : forall A A_hat N N_hat mu r omega Kr,
  1 <= Kr -> 0 <= mu -> 0 < r -> 0 <= omega -> 0 <= A -> 0 <= N ->
  rel ((Kr + 4) * eta u) A A_hat -> rel (Kr * eta u) N N_hat ->
  let '(a, b, c, d) := iso_leaf_entries A N mu r omega Kr in
  let '(a', b', c', d') := iso_leaf_entries_fl A_hat N_hat mu r omega Kr in
  rel ((Kr + 5) * eta u) a a' /\ rel 0 b b' /\ rel ((2 * Kr + 9) * eta u) c c' /\ rel ((Kr + 5) * eta u) d d'.
Proof.
  intros A A_hat N N_hat mu r omega Kr HK Hmu Hr Ho HA HN WA WN. simpl.
  pose proof (eta_nonneg u u_bounds) as He.
  assert (Wa : rel ((Kr + 5) * eta u) (A / Kr) (fl (A_hat / Kr))).
  { eapply rel_mono; [|apply round, rel_div; [lra | exact WA | apply rel_refl]]. lra. }
  assert (Wu : rel ((Kr + 3) * eta u) (mu * N / (Kr * r)) (fl (fl (mu * N_hat) / fl (Kr * r)))).
  { eapply rel_mono;
      [|apply round, rel_div; [nra | apply round, rel_mul; [apply rel_refl | exact WN] | apply round, rel_refl]].
    lra. }
  assert (Hu : 0 <= mu * N / (Kr * r)).
  { unfold Rdiv. apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; nra]. }
  split; [exact Wa | split; [apply rel_refl | split]].
  - eapply rel_mono; [|apply round, rel_mul; [exact Wu | exact Wa]]. lra.
  - (* 1 + û ω: û ω K + 4, the sum (1 exact) K + 4, rounded K + 5 *)
    assert (Wuw : rel ((Kr + 4) * eta u) (mu * N / (Kr * r) * omega)
                    (fl (fl (fl (mu * N_hat) / fl (Kr * r)) * omega))).
    { eapply rel_mono; [|apply round, rel_mul; [exact Wu | apply rel_refl]]. lra. }
    assert (W1 : rel ((Kr + 4) * eta u) 1 1) by (eapply rel_mono; [|apply rel_refl]; nra).
    assert (Ws : rel ((Kr + 4) * eta u) (1 + mu * N / (Kr * r) * omega)
                   (1 + fl (fl (fl (mu * N_hat) / fl (Kr * r)) * omega)))
      by (apply rel_add; [lra | nra | exact W1 | exact Wuw]).
    eapply rel_mono; [|apply round, Ws]. lra.
Qed.

(** rel k between non-negative numbers is the sandwich e^{−k} x ≤ y ≤ e^{k} x. *)
Lemma rel_sandwich : forall k x y, 0 <= x -> rel k x y -> exp (- k) * x <= y <= exp k * x.
Proof. intros k x y Hx [th [[H1 H2] ->]]. split; nra. Qed.

(** The computed leaf acts within 2(2K + 9)η of the exact one, at any x > 0. *)
Theorem iso_leaf_action : forall A A_hat N N_hat mu r omega Kr x,
  1 <= Kr -> 0 <= mu -> 0 < r -> 0 <= omega -> 0 < A -> 0 <= N -> 0 < x ->
  rel ((Kr + 4) * eta u) A A_hat -> rel (Kr * eta u) N N_hat ->
  let '(a, b, c, d) := iso_leaf_entries A N mu r omega Kr in
  let '(a', b', c', d') := iso_leaf_entries_fl A_hat N_hat mu r omega Kr in
  Rabs (ln (act a' b' c' d' x) - ln (act a b c d x)) <= 2 * ((2 * Kr + 9) * eta u).
Proof.
  intros A A_hat N N_hat mu r omega Kr x HK Hmu Hr Ho HA HN Hx WA WN.
  pose proof (iso_leaf_fl_rel A A_hat N N_hat mu r omega Kr HK Hmu Hr Ho (Rlt_le _ _ HA) HN WA WN) as W.
  simpl in W |- *. destruct W as [Wa [Wb [Wc Wd]]].
  pose proof (eta_nonneg u u_bounds) as He.
  set (k := (2 * Kr + 9) * eta u).
  assert (Hk : 0 <= k) by (unfold k; nra).
  assert (Ha : 0 < A / Kr) by (apply Rdiv_lt_0_compat; lra).
  assert (Hu : 0 <= mu * N / (Kr * r)).
  { unfold Rdiv. apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; nra]. }
  assert (Hc : 0 <= mu * N / (Kr * r) * (A / Kr)) by nra.
  assert (Hd : 0 < 1 + mu * N / (Kr * r) * omega) by nra.
  apply act_perturbed; try lra.
  - nra.
  - nra.
  - apply rel_sandwich; [lra|]. eapply rel_mono; [|exact Wa]. unfold k. nra.
  - apply rel_sandwich; [lra|]. eapply rel_mono; [|exact Wb]. exact Hk.
  - apply rel_sandwich; [lra|]. exact Wc.
  - apply rel_sandwich; [lra|]. eapply rel_mono; [|exact Wd]. unfold k. nra.
Qed.

End IsoLeaf.
