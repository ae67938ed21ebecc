(** * The diagonal KDN's covariance leaf formed in floating point (docs/error-model.md, "Diagonal KDN";
    check/diagonal_kdn_bound.hpp's "leaf" count)

    The covariance scan of one channel composes the leaves M = [[a, ω], [u a, 1 + u ω]], a = α²,
    u = μ k² / r (docs/math.md §4; algebra/leaves.hpp, diag_kdn_covariance_leaf). The reference forms
    them as

        û = fl(fl(fl(μ k) k) / r),   â = fl(α̂ α̂),   [[â, ω], [fl(û â), fl(1 + fl(û ω))]],

    α̂ = e^g within 2 roundings of α (the kernels' and the reference's exp within one ulp: the same
    hypothesis as KdnStep.v). In FloatError.v's model every entry is within 9 roundings of the exact
    leaf's ([kdn_leaf_fl_within]: â 5, ω 0, û â 3 + 5 + 1, 1 + û ω 3 + 1 + 1), any sign of k, so the
    leaf's action is within 18η (TreeRounding.mwithin_log_err): the count the C++ charges a KDN leaf
    in its scan bounds (TreeRounding.v and KlaScan.v then carry it through any tree and the
    application). *)

From Coq Require Import Reals Lra Lia.
From KalmanOracle Require Import Mobius FloatError Birkhoff TreeRounding KlaScan.
Open Scope R_scope.

Section Leaf.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round_any := within_round_any u u_bounds fl fl_everywhere.

(** The exact leaf and the reference's computed one. *)
Definition kdn_leaf (alpha omega mu key r : R) : mob :=
  let inf := mu * key * key / r in
  Mobius (alpha * alpha) omega (inf * (alpha * alpha)) (1 + inf * omega).

Definition kdn_leaf_fl (alpha_hat omega mu key r : R) : mob :=
  let inf := fl (fl (fl (mu * key) * key) / r) in
  let a := fl (alpha_hat * alpha_hat) in
  Mobius a omega (fl (inf * a)) (fl (1 + fl (inf * omega))).

(** û within 3 roundings of μ k² / r ≥ 0, any sign of k. *)
Lemma information_within : forall mu key r, 0 <= mu -> 0 < r ->
  within u 3 (mu * key * key / r) (fl (fl (fl (mu * key) * key) / r)).
Proof.
  intros mu key r Hmu Hr.
  assert (Hkk : 0 <= key * key) by nra.
  assert (Hmkk : 0 <= mu * key * key) by (rewrite Rmult_assoc; apply Rmult_le_pos; lra).
  assert (Hr' : 0 <= / r) by (left; apply Rinv_0_lt_compat; lra).
  apply round_any; [unfold Rdiv; apply Rmult_le_pos; lra|].
  unfold Rdiv. replace 2%nat with (2 + 0)%nat by reflexivity.
  apply (within_mul u (proj1 u_bounds) (proj2 u_bounds)); [exact Hmkk | exact Hr' | apply (phi_within u u_bounds fl fl_everywhere mu key Hmu)
                    | apply within_refl].
Qed.

Theorem kdn_leaf_fl_within : forall alpha alpha_hat omega mu key r,
  0 <= alpha -> 0 <= omega -> 0 <= mu -> 0 < r -> within u 2 alpha alpha_hat ->
  mwithin u 9 (kdn_leaf alpha omega mu key r) (kdn_leaf_fl alpha_hat omega mu key r).
Proof.
  intros alpha alpha_hat omega mu key r Ha Ho Hmu Hr Walpha.
  pose proof (information_within mu key r Hmu Hr) as Wu.
  assert (Hu : 0 <= mu * key * key / r).
  { unfold Rdiv. assert (0 <= key * key) by nra.
    assert (0 <= mu * key * key) by (rewrite Rmult_assoc; apply Rmult_le_pos; lra).
    apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra]. }
  assert (Wa : within u 5 (alpha * alpha) (fl (alpha_hat * alpha_hat))).
  { apply round_any; [nra|]. replace 4%nat with (2 + 2)%nat by reflexivity.
    apply (within_mul u (proj1 u_bounds) (proj2 u_bounds)); [exact Ha | exact Ha | exact Walpha | exact Walpha]. }
  unfold kdn_leaf, kdn_leaf_fl, mwithin. simpl. split; [|split; [|split]].
  - apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 5); [lia | nra | exact Wa].
  - apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 0); [lia | exact Ho | apply within_refl].
  - (* û â: 3 + 5, rounded 9 *)
    apply round_any; [nra|]. replace 8%nat with (3 + 5)%nat by reflexivity.
    apply (within_mul u (proj1 u_bounds) (proj2 u_bounds)); [exact Hu | nra | exact Wu | exact Wa].
  - (* 1 + û ω: û ω 3 + 0, rounded 4; the sum (1 exact), rounded 5 *)
    apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 5); [lia | nra|].
    apply round_any; [nra|]. apply within_add.
    + apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 0); [lia | lra | apply within_refl].
    + apply round_any; [nra|]. replace 3%nat with (3 + 0)%nat by reflexivity.
      apply (within_mul u (proj1 u_bounds) (proj2 u_bounds)); [exact Hu | exact Ho | exact Wu | apply within_refl].
Qed.

End Leaf.
