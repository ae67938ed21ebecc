(** * The KDNs' gains in floating point: the counts of check/diagonal_kdn_bound.hpp and
    check/isotropic_kdn_bound.hpp (docs/error-model.md, "Diagonal KDN", "Isotropic KDN")

    κ_i = p̂_i k_i / (r + Σ_j p̂_j k_j²). The reference (models/diagonal.hpp) computes the innovation
    variance from r, adding fl(fl(p̂_j k_j) k_j) for j = 0, 1, …, and then κ̂_i = fl(fl(p̂_i k_i) / that),
    from computed predictions p̂_j within E_j of the exact ones (KdnStep.v's recursion, or a scan).
    In FloatError.v's model, with the K + 1 summands added by any binary tree (every order):

        κ̂_i within e^{±(E_i + E_max + (K + 4)η)} of κ_i,   E_max = max_j E_j,

    for k_i of any sign ([diagonal_gain_rel]): the numerator one rounding past p̂_i, each
    denominator term two past p̂_j, K additions of positive terms, the quotient one. That is the
    bound the C++ stores for `gain` (E(κ) ≤ E(p̂_i) + max_j E(p̂_j) + K + 4).

    The isotropic gain β = b̂ / (r + b̂ ‖k‖²), computed as fl(b̂ / fl(r + fl(b̂ N̂))) from b̂ within E
    of b and N̂ = ‖k‖² within Kη (the K-term sum from +0: [key_norm_rel]), is within
    e^{±(E + (K + 3)η)} of β ([isotropic_gain_rel]): b̂'s error enters once, not twice, because
    b ↦ b/(r + bN) moves by at most the factor b moves by ([isotropic_gain_map_rel]). That is
    the C++'s E(β) ≤ E(b̂) + K + 3. *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep PositiveSum.
Import ListNotations.
Open Scope R_scope.

Section Gain.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.
Local Notation computed_sum := (PositiveSum.computed_sum fl).

(** A denominator term fl(fl(p̂ k) k) within E + 2η of p k², for k of any sign. *)
Lemma innovation_term_rel : forall E p p_hat key, rel E p p_hat ->
  rel (E + 2 * eta u) (p * key * key) (fl (fl (p_hat * key) * key)).
Proof.
  intros E p p_hat key Hp.
  eapply rel_mono;
    [|apply round, rel_mul; [apply round, rel_mul; [exact Hp | apply rel_refl] | apply rel_refl]].
  lra.
Qed.

(** The innovation variance's summands: r itself (exact, r ≥ 0) and K terms p_j k_j², each from a
    p̂_j within E_j ≤ E_max of p_j ≥ 0. *)
Definition innovation_leaf (E_max : R) (leaf : R * R * R) : Prop :=
  let '(t, c, k) := leaf in
  (0 <= t /\ c = t /\ k = 0) \/
  exists p p_hat key E, 0 <= p /\ 0 <= E <= E_max /\ rel E p p_hat /\
    t = p * key * key /\ c = fl (fl (p_hat * key) * key) /\ k = E + 2 * eta u.

Theorem innovation_rel : forall (T : sum_tree) K E_max,
  0 <= E_max -> leaf_count T = S K -> (forall leaf, In leaf (leaf_terms T) -> innovation_leaf E_max leaf) ->
  rel (E_max + 2 * eta u + INR K * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros T K E_max HE HK Hleaves.
  pose proof (eta_nonneg u u_bounds) as He.
  replace K with (S K - 1)%nat by lia.
  refine (uniform_sum_rel_terms u u_bounds fl fl_everywhere (fun t c k => innovation_leaf E_max (t, c, k))
            _ T (S K) _ (fun t c k H => Hleaves (t, c, k) H) HK).
  intros t c k [[Ht [-> ->]] | [p [p_hat [key [E [Hp [HE' [Hr [-> [-> ->]]]]]]]]]].
  - split; [exact Ht | split; [lra | split; [lra | apply rel_refl]]].
  - split; [assert (0 <= key * key) by nra; nra|].
    split; [lra | split; [lra | apply innovation_term_rel; exact Hr]].
Qed.

(** The gain of channel i. *)
Theorem diagonal_gain_rel : forall (T : sum_tree) K E_max E p p_hat key,
  0 <= E_max -> leaf_count T = S K -> (forall leaf, In leaf (leaf_terms T) -> innovation_leaf E_max leaf) ->
  0 < exact_sum T -> rel E p p_hat ->
  rel (E + E_max + (INR K + 4) * eta u) (p * key / exact_sum T) (fl (fl (p_hat * key) / computed_sum T)).
Proof.
  intros T K E_max E p p_hat key HE HK Hleaves Hpos Hp.
  pose proof (innovation_rel T K E_max HE HK Hleaves) as HD.
  eapply rel_mono;
    [|apply round, rel_div; [lra | apply round, rel_mul; [exact Hp | apply rel_refl] | exact HD]].
  lra.
Qed.

(** r + x over r + x m lies between 1 and 1/m; with θ_b and m = θ_b φ: the map b ↦ b/(r + b N)
    moves by at most e^{E + J} when b moves by θ_b ∈ e^{±E} and N by φ ∈ e^{±J}. *)
Lemma isotropic_gain_map_rel : forall r b N th_b phi E J, 0 < r -> 0 < b -> 0 <= N -> 0 <= E -> 0 <= J ->
  exp (- E) <= th_b <= exp E -> exp (- J) <= phi <= exp J ->
  rel (E + J) (b / (r + b * N)) (b * th_b / (r + b * th_b * (N * phi))).
Proof.
  intros r b N th_b phi E J Hr Hb HN HE HJ [Hb1 Hb2] [Hp1 Hp2].
  assert (HeE : 1 <= exp E) by (rewrite <- exp_0; destruct (Req_dec E 0) as [->|]; [lra | left; apply exp_increasing; lra]).
  assert (HeJ : 1 <= exp J) by (rewrite <- exp_0; destruct (Req_dec J 0) as [->|]; [lra | left; apply exp_increasing; lra]).
  assert (HmE : exp E * exp (- E) = 1) by (rewrite <- exp_plus; replace (E + - E) with 0 by ring; apply exp_0).
  assert (HmJ : exp J * exp (- J) = 1) by (rewrite <- exp_plus; replace (J + - J) with 0 by ring; apply exp_0).
  assert (0 < exp (- E)) by apply exp_pos. assert (0 < exp (- J)) by apply exp_pos.
  assert (Hth : 0 < th_b) by lra. assert (Hphi : 0 < phi) by lra.
  assert (HbN : 0 <= b * N) by nra.
  set (D := r + b * N). set (D' := r + b * th_b * (N * phi)).
  assert (HD : 0 < D) by (unfold D; lra).
  assert (0 <= N * phi) by (apply Rmult_le_pos; lra). assert (0 < b * th_b) by (apply Rmult_lt_0_compat; lra).
  assert (HP : 0 <= b * th_b * (N * phi)) by (apply Rmult_le_pos; lra).
  assert (HD' : 0 < D') by (unfold D'; lra).
  assert (HE1 : exp (- E) <= 1) by nra. assert (HJ1 : exp (- J) <= 1) by nra.
  assert (0 <= b * th_b * N) by (apply Rmult_le_pos; lra).
  exists (th_b * D / D'). split.
  - rewrite Ropp_plus_distr, !exp_plus. split.
    + (* e^{−E} e^{−J} D' ≤ θ_b D *)
      apply Rmult_le_reg_r with D'; [exact HD'|].
      replace (th_b * D / D' * D') with (th_b * D) by (field; lra).
      assert (C1 : exp (- E) * exp (- J) <= exp (- E) * 1) by (apply Rmult_le_compat_l; lra).
      assert (C2 : exp (- J) * phi <= exp (- J) * exp J) by (apply Rmult_le_compat_l; lra).
      assert (C3 : exp (- E) * (exp (- J) * phi) <= 1 * 1) by (apply Rmult_le_compat; nra).
      set (e := exp (- E) * exp (- J)).
      assert (A1 : e <= th_b) by (unfold e; lra).
      assert (A2 : e * phi <= 1) by (unfold e; rewrite Rmult_assoc; lra).
      assert (B1 : e * r <= th_b * r) by (apply Rmult_le_compat_r; lra).
      assert (B2 : e * phi * (b * th_b * N) <= 1 * (b * th_b * N)) by (apply Rmult_le_compat_r; lra).
      unfold D, D'. replace (e * (r + b * th_b * (N * phi))) with (e * r + e * phi * (b * th_b * N)) by ring.
      replace (th_b * (r + b * N)) with (th_b * r + 1 * (b * th_b * N)) by ring. lra.
    + (* θ_b D ≤ e^{E} e^{J} D' *)
      apply Rmult_le_reg_r with D'; [exact HD'|].
      replace (th_b * D / D' * D') with (th_b * D) by (field; lra).
      assert (C1 : exp E * 1 <= exp E * exp J) by (apply Rmult_le_compat_l; lra).
      assert (C2 : exp J * exp (- J) <= exp J * phi) by (apply Rmult_le_compat_l; lra).
      assert (C3 : 1 * 1 <= exp E * (exp J * phi)) by (apply Rmult_le_compat; lra).
      set (e := exp E * exp J).
      assert (A1 : th_b <= e) by (unfold e; lra).
      assert (A2 : 1 <= e * phi) by (unfold e; rewrite Rmult_assoc; lra).
      assert (B1 : th_b * r <= e * r) by (apply Rmult_le_compat_r; lra).
      assert (B2 : 1 * (b * th_b * N) <= e * phi * (b * th_b * N)) by (apply Rmult_le_compat_r; lra).
      unfold D, D'. replace (e * (r + b * th_b * (N * phi))) with (e * r + e * phi * (b * th_b * N)) by ring.
      replace (th_b * (r + b * N)) with (th_b * r + 1 * (b * th_b * N)) by ring. lra.
  - unfold D, D'. field. split; lra.
Qed.

(** ‖k‖² from +0 in index order, or by any tree: K terms fl(kᵢ kᵢ), within Kη. *)
Theorem key_norm_rel : forall (T : sum_tree) K, leaf_count T = K -> (1 <= K)%nat ->
  (forall t c k, In (t, c, k) (leaf_terms T) -> exists key, t = key * key /\ c = fl (key * key) /\ k = eta u) ->
  rel (INR K * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros T K HK HK1 Hterms.
  pose proof (eta_nonneg u u_bounds) as He.
  eapply rel_mono; [|refine (uniform_sum_rel_terms u u_bounds fl fl_everywhere _ (eta u) T K _ Hterms HK)].
  - rewrite minus_INR by lia. simpl (INR 1). lra.
  - intros t c k [key [-> [-> ->]]].
    split; [nra | split; [lra | split; [lra|]]]. eapply rel_mono; [|apply round, rel_refl]. lra.
Qed.

(** The isotropic gain β̂ = fl(b̂ / fl(r + fl(b̂ N̂))). *)
Theorem isotropic_gain_rel : forall r b b_hat N N_hat E K, 0 < r -> 0 < b -> 0 <= N -> 0 <= E ->
  rel E b b_hat -> rel (INR K * eta u) N N_hat ->
  rel (E + (INR K + 3) * eta u) (b / (r + b * N)) (fl (b_hat / fl (r + fl (b_hat * N_hat)))).
Proof.
  intros r b b_hat N N_hat E K Hr Hb HN HE [th_b [Hthb ->]] [th_N [HthN ->]].
  pose proof (eta_nonneg u u_bounds) as He.
  assert (HKe : 0 <= INR K * eta u) by (apply Rmult_le_pos; [apply pos_INR | exact He]).
  (* the product's rounding: fl(b̂ N̂) = b̂ N̂ θ₁ *)
  destruct (round 0 (b * th_b * (N * th_N)) (b * th_b * (N * th_N)) (rel_refl _)) as [th1 [Hth1 Hfl1]].
  rewrite Rplus_0_l in Hth1.
  set (phi := th_N * th1).
  assert (Hphi : exp (- (INR K * eta u + eta u)) <= phi <= exp (INR K * eta u + eta u)).
  { unfold phi. rewrite Ropp_plus_distr, !exp_plus.
    assert (0 < exp (- (INR K * eta u))) by apply exp_pos. assert (0 < exp (- eta u)) by apply exp_pos.
    destruct HthN, Hth1. split; nra. }
  assert (Hprod : fl (b * th_b * (N * th_N)) = b * th_b * (N * phi)) by (rewrite Hfl1; unfold phi; ring).
  rewrite Hprod.
  assert (Hmap := isotropic_gain_map_rel r b N th_b phi E (INR K * eta u + eta u) Hr Hb HN HE
                    ltac:(lra) Hthb Hphi).
  (* the sum's rounding, then the quotient's *)
  assert (Hpos : 0 < r + b * th_b * (N * phi)).
  { destruct Hthb as [Hthb1 _]. assert (0 < exp (- E)) by apply exp_pos.
    destruct Hphi as [Hphi1 _]. assert (0 < exp (- (INR K * eta u + eta u))) by apply exp_pos.
    assert (0 <= N * phi) by (apply Rmult_le_pos; lra). assert (0 < b * th_b) by (apply Rmult_lt_0_compat; lra).
    assert (0 <= b * th_b * (N * phi)) by (apply Rmult_le_pos; lra). lra. }
  assert (Hden : rel (0 + eta u) (r + b * th_b * (N * phi)) (fl (r + b * th_b * (N * phi))))
    by (apply round, rel_refl).
  assert (Hq : rel (0 + (0 + eta u)) (b * th_b / (r + b * th_b * (N * phi)))
                 (b * th_b / fl (r + b * th_b * (N * phi))))
    by (apply rel_div; [lra | apply rel_refl | exact Hden]).
  destruct Hmap as [ps [Hps Hy]]. destruct Hq as [pq [Hpq Hz]].
  assert (Hpre : rel (E + (INR K * eta u + eta u) + eta u) (b / (r + b * N))
                   (b * th_b / fl (r + b * th_b * (N * phi)))).
  { exists (ps * pq). split; [|rewrite Hz, Hy; ring].
    rewrite Rplus_0_l, Rplus_0_l in Hpq.
    set (A := E + (INR K * eta u + eta u)) in *.
    assert (0 < exp (- A)) by apply exp_pos.
    assert (0 < exp (- eta u)) by apply exp_pos.
    rewrite Ropp_plus_distr, !exp_plus. destruct Hps, Hpq.
    split; apply Rmult_le_compat; lra. }
  eapply rel_mono; [|apply round, Hpre]. rewrite Rmult_plus_distr_r. lra.
Qed.

End Gain.
