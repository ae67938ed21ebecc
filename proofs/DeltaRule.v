(** * The delta rules' a-posteriori bound: the error-propagation step (docs/error-model.md,
    "Delta rules: a-posteriori bound"; check/delta_rule_bound.hpp)

    One value column of the delta-rule memory evolves as s_t = A_t s_{t−1} + β_t k_t v_{t,j} with
    A_t = (I − β_t k_t k_tᵀ) D_t (D_t the decay, the identity for DeltaNet). The bound the generator
    stores per token and element rests on two facts, proved here for any real inner-product space
    (so for ℝ^K with any K):

    1. [erase_nonexpansive]: with β ≥ 0 and β‖k‖² ≤ 2 the erase step x ↦ x − β k (kᵀx) does not
       increase the Euclidean norm (‖x − βk(kᵀx)‖² = ‖x‖² − β(kᵀx)²(2 − β‖k‖²)), so
       ‖A_t x‖ ≤ d_t ‖x‖ whenever the decay obeys ‖D_t x‖ ≤ d_t ‖x‖ ([delta_step_bounded]);
    2. [running_error_bound]: an error obeying ε_t = A_t ε_{t−1} + ℓ_t, with a local rounding ℓ_t
       bounded by a monotone function L_t of the error so far, stays below the running bound
       e_t = d_t e_{t−1} + L_t(e_{t−1}): the recursion the generator evaluates.

    The local bounds L_t themselves (Higham's model with underflow, per inner product) are the
    standard ones of docs/error-model.md; the inner product's, in any summation order, is
    InnerProduct.v's [inner_product_gamma] (and [binary32_inner_product]); the others are not
    re-derived here. *)

From Coq Require Import Reals Lra Lia.
Open Scope R_scope.

Section InnerProductSpace.

Variable V : Type.
Variable add : V -> V -> V.
Variable scal : R -> V -> V.
Variable dot : V -> V -> R.
Hypothesis dot_sym : forall x y, dot x y = dot y x.
Hypothesis dot_add_l : forall x y z, dot (add x y) z = dot x z + dot y z.
Hypothesis dot_scal_l : forall a x y, dot (scal a x) y = a * dot x y.
Hypothesis dot_pos : forall x, 0 <= dot x x.

Lemma dot_add_r : forall x y z, dot x (add y z) = dot x y + dot x z.
Proof. intros. rewrite dot_sym, dot_add_l, (dot_sym y), (dot_sym z). reflexivity. Qed.

Lemma dot_scal_r : forall a x y, dot x (scal a y) = a * dot x y.
Proof. intros. rewrite dot_sym, dot_scal_l, dot_sym. reflexivity. Qed.

(** The Euclidean norm. *)
Definition norm (x : V) : R := sqrt (dot x x).

Lemma norm_nonneg : forall x, 0 <= norm x.
Proof. intros. apply sqrt_pos. Qed.

Lemma norm_sqr : forall x, norm x * norm x = dot x x.
Proof. intros. apply sqrt_sqrt, dot_pos. Qed.

(** ‖x + a y‖² expanded. *)
Lemma dot_add_scal : forall x y a,
  dot (add x (scal a y)) (add x (scal a y)) = dot x x + 2 * a * dot x y + a * a * dot y y.
Proof.
  intros. rewrite dot_add_l, !dot_add_r, !dot_scal_l, !dot_scal_r, (dot_sym y x). ring.
Qed.

(** Cauchy–Schwarz, by the discriminant of t ↦ ‖x + t y‖². *)
Lemma cauchy_schwarz : forall x y, dot x y * dot x y <= dot x x * dot y y.
Proof.
  intros x y.
  destruct (Req_dec (dot y y) 0) as [Hyy|Hyy].
  - (* ‖y‖ = 0: then ⟨x, y⟩ = 0, else t = −(‖x‖² + 1)/(2⟨x, y⟩) makes ‖x + t y‖² negative. *)
    destruct (Req_dec (dot x y) 0) as [Hxy|Hxy].
    + rewrite Hxy, Hyy. lra.
    + pose proof (dot_pos (add x (scal (- (dot x x + 1) / (2 * dot x y)) y))) as H.
      rewrite dot_add_scal, Hyy in H.
      replace (2 * (- (dot x x + 1) / (2 * dot x y)) * dot x y) with (- (dot x x + 1)) in H
        by (field; assumption).
      lra.
  - (* t = −⟨x, y⟩/‖y‖². *)
    pose proof (dot_pos y) as Hy.
    assert (Hy' : 0 < dot y y) by lra.
    pose proof (dot_pos (add x (scal (- dot x y / dot y y) y))) as H.
    rewrite dot_add_scal in H.
    replace (dot x x + 2 * (- dot x y / dot y y) * dot x y
             + - dot x y / dot y y * (- dot x y / dot y y) * dot y y)
      with (dot x x - dot x y * dot x y / dot y y) in H by (field; lra).
    assert (H' : dot x y * dot x y / dot y y <= dot x x) by lra.
    apply (Rmult_le_compat_r (dot y y)) in H'; [|lra].
    replace (dot x y * dot x y / dot y y * dot y y) with (dot x y * dot x y) in H'
      by (field; lra).
    lra.
Qed.

Lemma dot_le_norms : forall x y, dot x y <= norm x * norm y.
Proof.
  intros x y.
  pose proof (cauchy_schwarz x y) as H.
  rewrite <- (norm_sqr x), <- (norm_sqr y) in H.
  apply Rsqr_incr_0_var; [unfold Rsqr; nra|].
  apply Rmult_le_pos; apply norm_nonneg.
Qed.

(** The triangle inequality of the Euclidean norm. *)
Lemma norm_triangle : forall x y, norm (add x y) <= norm x + norm y.
Proof.
  intros x y.
  pose proof (norm_nonneg x). pose proof (norm_nonneg y). pose proof (norm_nonneg (add x y)).
  assert (Hsq : norm (add x y) * norm (add x y) <= (norm x + norm y) * (norm x + norm y)).
  { rewrite norm_sqr, dot_add_l, !dot_add_r, (dot_sym y x).
    pose proof (dot_le_norms x y).
    rewrite <- (norm_sqr x), <- (norm_sqr y). nra. }
  apply Rsqr_incr_0_var; [unfold Rsqr; assumption|lra].
Qed.

(** ** 1. The erase step is non-expansive *)

(** x ↦ x − β k (kᵀx): the delta rule's linear part without the decay. *)
Definition erase (beta : R) (k x : V) : V := add x (scal (- (beta * dot k x)) k).

(** ‖x − βk(kᵀx)‖² = ‖x‖² − β(kᵀx)²(2 − β‖k‖²): the identity behind the eigenvalues 1 and
    1 − β‖k‖² of the symmetric I − βkkᵀ. *)
Lemma erase_norm_sqr : forall beta k x,
  dot (erase beta k x) (erase beta k x)
  = dot x x - beta * (dot k x * dot k x) * (2 - beta * dot k k).
Proof. intros. unfold erase. rewrite dot_add_scal, (dot_sym x k). ring. Qed.

Theorem erase_nonexpansive : forall beta k x,
  0 <= beta -> beta * dot k k <= 2 -> norm (erase beta k x) <= norm x.
Proof.
  intros beta k x Hb Hbk. unfold norm. apply sqrt_le_1_alt.
  rewrite erase_norm_sqr.
  assert (0 <= beta * (dot k x * dot k x) * (2 - beta * dot k k)).
  { apply Rmult_le_pos; [apply Rmult_le_pos; [assumption|nra]|lra]. }
  lra.
Qed.

(** The whole step's linear part A = (I − βkkᵀ)D: if the decay D shrinks norms by at most d
    (d = max α for a diagonal decay in [0, 1], d = 1 for DeltaNet), so does A. *)
Theorem delta_step_bounded : forall (decay : V -> V) d beta k,
  (forall x, norm (decay x) <= d * norm x) ->
  0 <= beta -> beta * dot k k <= 2 ->
  forall x, norm (erase beta k (decay x)) <= d * norm x.
Proof.
  intros decay d beta k Hd Hb Hbk x.
  eapply Rle_trans; [apply erase_nonexpansive; assumption|apply Hd].
Qed.

(** ** 2. The running bound *)

(** e_0 given, e_t = d_t e_{t−1} + L_t(e_{t−1}). *)
Fixpoint running_bound (d : nat -> R) (L : nat -> R -> R) (e0 : R) (t : nat) : R :=
  match t with
  | O => e0
  | S t' => d (S t') * running_bound d L e0 t' + L (S t') (running_bound d L e0 t')
  end.

(** The computed column's error ε_t = ŝ_t − s_t obeys ε_t = A_t ε_{t−1} + ℓ_t exactly (the step
    is affine in s and A_t does not depend on s); ℓ_t, the local rounding of step t, is bounded
    from the exact trajectory and the error so far by L_t, monotone in that error. *)
Theorem running_error_bound :
  forall (A : nat -> V -> V) (eps l : nat -> V) (d : nat -> R) (L : nat -> R -> R) (e0 : R),
  (forall t x, norm (A t x) <= d t * norm x) ->
  (forall t, 0 <= d t) ->
  (forall t a b, a <= b -> L t a <= L t b) ->
  (forall t, eps (S t) = add (A (S t) (eps t)) (l (S t))) ->
  (forall t, norm (l (S t)) <= L (S t) (norm (eps t))) ->
  norm (eps O) <= e0 ->
  forall t, norm (eps t) <= running_bound d L e0 t.
Proof.
  intros A eps l d L e0 HA Hd HL Hrec Hl He0 t.
  induction t as [|t IH]; simpl; [assumption|].
  rewrite Hrec.
  eapply Rle_trans; [apply norm_triangle|].
  apply Rplus_le_compat.
  - eapply Rle_trans; [apply HA|]. apply Rmult_le_compat_l; [apply Hd|assumption].
  - eapply Rle_trans; [apply Hl|]. apply HL. assumption.
Qed.

(** Every entry of the column is within the column's norm error: |⟨eᵢ, ε⟩| ≤ ‖ε‖ for a unit
    vector eᵢ, so the per-element budget of the final state is e_T. *)
Corollary entry_within_norm : forall u x, dot u u = 1 -> Rabs (dot u x) <= norm x.
Proof.
  intros u x Hu.
  assert (Hn : norm u = 1) by (unfold norm; rewrite Hu; apply sqrt_1).
  apply Rabs_le. split.
  - assert (H := dot_le_norms (scal (-1) u) x).
    rewrite dot_scal_l in H.
    assert (Hs : norm (scal (-1) u) = 1).
    { unfold norm. rewrite dot_scal_l, dot_scal_r, Hu. replace (-1 * (-1 * 1)) with 1 by ring.
      apply sqrt_1. }
    rewrite Hs in H. lra.
  - assert (H := dot_le_norms u x). rewrite Hn in H. lra.
Qed.

End InnerProductSpace.
