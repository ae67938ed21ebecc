(** * The KDNs' readout variances in floating point: the counts of check/diagonal_kdn_bound.hpp and
    check/isotropic_kdn_bound.hpp (docs/error-model.md, "Diagonal KDN", "Isotropic KDN")

    The reference computes, per head and token, with s_i = fl(τ̂ q_i) (τ̂ the query scale as the
    dtype holds it, within a roundings of τ; a = 2 for the default 1/√K, Python's K ** -0.5 in
    binary64 then the dtype, and a = 0 for a given τ):

      diagonal   V̂ = Σ_i fl(fl(s_i s_i) p̂_i), from +0 in index order (models/diagonal.hpp),
      isotropic  V̂ = fl(b̂ Q̂), Q̂ = Σ_i fl(s_i s_i) from +0 (models/isotropic.hpp),

    from the computed covariances p̂_i within E_i of p_i (b̂ within E of b): KdnStep.v and IsoStep.v
    for the sequential recursions, TreeRounding.v for the scans. In FloatError.v's model, for the
    terms added by any binary tree (every summation order) and so for the reference's:

      diagonal   V̂ within e^{±(max_i E_i + (2a + K + 3)η)} of V = τ² Σ_i q_i² p_i  [diagonal_readout_variance_rel],
      isotropic  V̂ within e^{±(E + (2a + K + 3)η)} of V = τ² b ‖q‖²          [isotropic_readout_variance_rel],

    with a = 2 the C++'s E + (K + 7)η for both ([diagonal_readout_variance_default],
    [isotropic_readout_variance_default]). *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep PositiveSum.
Import ListNotations.
Open Scope R_scope.

Section Readout.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.
Local Notation computed_sum := (PositiveSum.computed_sum fl).

(** The query scaled and squared: fl(fl(τ̂ q) fl(τ̂ q)) within (2a + 3)η of (τ q)², τ̂ within aη of τ. *)
Lemma scaled_square_rel : forall a tau tau_hat q, rel (a * eta u) tau tau_hat ->
  rel ((2 * a + 3) * eta u) (tau * q * (tau * q)) (fl (fl (tau_hat * q) * fl (tau_hat * q))).
Proof.
  intros a tau tau_hat q Ht.
  assert (Hs : rel (a * eta u + 0 + eta u) (tau * q) (fl (tau_hat * q))).
  { apply round, rel_mul; [exact Ht | apply rel_refl]. }
  eapply rel_mono; [|apply round, rel_mul; [exact Hs | exact Hs]]. lra.
Qed.

(** A diagonal readout-variance term fl(fl(s s) p̂) within E + (2a + 4)η of (τ q)² p. *)
Lemma diagonal_term_rel : forall a E tau tau_hat q p p_hat, rel (a * eta u) tau tau_hat -> rel E p p_hat ->
  rel (E + (2 * a + 4) * eta u) (tau * q * (tau * q) * p) (fl (fl (fl (tau_hat * q) * fl (tau_hat * q)) * p_hat)).
Proof.
  intros a E tau tau_hat q p p_hat Ht Hp.
  eapply rel_mono; [|apply round, rel_mul; [apply (scaled_square_rel a tau tau_hat q Ht) | exact Hp]]. lra.
Qed.

(** The diagonal KDN: K terms added by any tree, each from a p̂_i within E_i ≤ E_max of p_i ≥ 0. *)
Theorem diagonal_readout_variance_rel : forall (T : sum_tree) K a E_max tau tau_hat,
  0 <= a -> leaf_count T = K -> rel (a * eta u) tau tau_hat ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists q p p_hat E, 0 <= p /\ 0 <= E <= E_max /\ rel E p p_hat /\
       t = tau * q * (tau * q) * p /\ c = fl (fl (fl (tau_hat * q) * fl (tau_hat * q)) * p_hat) /\
       k = E + (2 * a + 4) * eta u) ->
  rel (E_max + (2 * a + 4) * eta u + INR (K - 1) * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros T K a E_max tau tau_hat Ha HK Ht Hterms.
  pose proof (eta_nonneg u u_bounds) as He.
  refine (uniform_sum_rel_terms u u_bounds fl fl_everywhere _ (E_max + (2 * a + 4) * eta u) T K _ Hterms HK).
  intros t c k [q [p [p_hat [E [Hp [HE [Hr [-> [-> ->]]]]]]]]].
  split; [assert (0 <= tau * q * (tau * q)) by nra; nra|].
  split; [nra | split; [lra | apply (diagonal_term_rel a E tau tau_hat q p p_hat Ht Hr)]].
Qed.

(** The isotropic KDN: Q̂ = Σ_i fl(s_i s_i) by any tree of K leaves, then fl(b̂ Q̂), b̂ within E of b. *)
Theorem isotropic_readout_variance_rel : forall (T : sum_tree) K a E tau tau_hat b b_hat,
  0 <= a -> leaf_count T = K -> rel (a * eta u) tau tau_hat -> rel E b b_hat ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists q, t = tau * q * (tau * q) /\ c = fl (fl (tau_hat * q) * fl (tau_hat * q)) /\
       k = (2 * a + 3) * eta u) ->
  rel (E + (2 * a + 3) * eta u + INR (K - 1) * eta u + eta u) (b * exact_sum T) (fl (b_hat * computed_sum T)).
Proof.
  intros T K a E tau tau_hat b b_hat Ha HK Ht Hb Hterms.
  pose proof (eta_nonneg u u_bounds) as He.
  assert (HQ : rel ((2 * a + 3) * eta u + INR (K - 1) * eta u) (exact_sum T) (computed_sum T)).
  { refine (uniform_sum_rel_terms u u_bounds fl fl_everywhere _ ((2 * a + 3) * eta u) T K _ Hterms HK).
    intros t c k [q [-> [-> ->]]].
    split; [nra | split; [nra | split; [lra | apply (scaled_square_rel a tau tau_hat q Ht)]]]. }
  eapply rel_mono; [|apply round, rel_mul; [exact Hb | exact HQ]]. lra.
Qed.

(** With the default query scale (a = 2): E + (K + 7)η, the counts of check/diagonal_kdn_bound.hpp
    and check/isotropic_kdn_bound.hpp. *)
Corollary diagonal_readout_variance_default : forall (T : sum_tree) K E_max tau tau_hat,
  (1 <= K)%nat -> leaf_count T = K -> rel (2 * eta u) tau tau_hat ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists q p p_hat E, 0 <= p /\ 0 <= E <= E_max /\ rel E p p_hat /\
       t = tau * q * (tau * q) * p /\ c = fl (fl (fl (tau_hat * q) * fl (tau_hat * q)) * p_hat) /\
       k = E + (2 * 2 + 4) * eta u) ->
  rel (E_max + (INR K + 7) * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros T K E_max tau tau_hat HK1 HK Ht Hterms.
  eapply rel_mono; [|apply (diagonal_readout_variance_rel T K 2 E_max tau tau_hat); [lra | exact HK | exact Ht | exact Hterms]].
  rewrite minus_INR by lia. simpl (INR 1). lra.
Qed.

Corollary isotropic_readout_variance_default : forall (T : sum_tree) K E tau tau_hat b b_hat,
  (1 <= K)%nat -> leaf_count T = K -> rel (2 * eta u) tau tau_hat -> rel E b b_hat ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists q, t = tau * q * (tau * q) /\ c = fl (fl (tau_hat * q) * fl (tau_hat * q)) /\ k = (2 * 2 + 3) * eta u) ->
  rel (E + (INR K + 7) * eta u) (b * exact_sum T) (fl (b_hat * computed_sum T)).
Proof.
  intros T K E tau tau_hat b b_hat HK1 HK Ht Hb Hterms.
  eapply rel_mono;
    [|apply (isotropic_readout_variance_rel T K 2 E tau tau_hat b b_hat); [lra | exact HK | exact Ht | exact Hb | exact Hterms]].
  rewrite minus_INR by lia. simpl (INR 1). lra.
Qed.

End Readout.
