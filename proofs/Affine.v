(** * Affine maps x ↦ α x + ρ: docs/math.md §8 fact 5 (the KLA information mean, §6);
    reference/include/kalman_oracle/algebra/affine.hpp.

    [compose later earlier] = (α₂α₁, α₂ρ₁ + ρ₂), as [affine_compose]. *)

From Coq Require Import Reals Lra.
Open Scope R_scope.

Record affine := Affine { alpha : R; rho : R }.

Lemma affine_ext : forall m n, alpha m = alpha n -> rho m = rho n -> m = n.
Proof. intros [] []; simpl; intros; subst; reflexivity. Qed.

Definition acompose (later earlier : affine) : affine :=
  Affine (alpha later * alpha earlier) (alpha later * rho earlier + rho later).

Definition aidentity : affine := Affine 1 0.

Definition aapply (m : affine) (x : R) : R := alpha m * x + rho m.

Theorem acompose_assoc : forall m2 m1 m0,
  acompose m2 (acompose m1 m0) = acompose (acompose m2 m1) m0.
Proof. intros [] [] []; apply affine_ext; simpl; ring. Qed.

Theorem acompose_identity_l : forall m, acompose aidentity m = m.
Proof. intros []; apply affine_ext; simpl; ring. Qed.

Theorem acompose_identity_r : forall m, acompose m aidentity = m.
Proof. intros []; apply affine_ext; simpl; ring. Qed.

(** The action: a monoid action on all of R (no side condition). *)
Theorem aapply_identity : forall x, aapply aidentity x = x.
Proof. intros; unfold aapply; simpl; ring. Qed.

Theorem aapply_compose : forall l e x, aapply (acompose l e) x = aapply l (aapply e x).
Proof. intros [] [] x; unfold aapply; simpl; ring. Qed.

(** An affine map is the Möbius map [[α, ρ], [0, 1]] (the embedding is a monoid morphism;
    see [affine_as_mobius_compose] in Models.v). *)
