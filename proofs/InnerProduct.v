(** * The local bound of an inner product in any summation order (docs/error-model.md, "Delta rules:
    a-posteriori bound", *Local bound L_t*; check/delta_rule_bound.hpp)

    The delta rules' running bound (DeltaRule.v) adds, per token, a local bound L_t built from the
    rounding errors of inner products such as ŵ = fl(Σᵢ kᵢ p̂ᵢ), computed in any order. This file
    proves the bound that L_t uses for them, from the data rather than from norms:

        |ŵ − Σᵢ xᵢ yᵢ| ≤ γ_n Σᵢ |xᵢ yᵢ| + (1 + γ_n) n η₀,      γ_n = n u / (1 − n u),

    for n products summed by any binary tree, in Higham's model with underflow: each product
    rounds as xy(1 + δ) + η (|δ| ≤ u, |η| ≤ η₀) and each addition of two computed values as
    s(1 + δ) (additions commit no absolute error).

    Part 1 is the abstract model ([fl] any function on the reals, the model asked only where the
    computation rounds); [inner_product_tree_error] carries the exact count (1 + u)^k − 1 for a
    tree of depth k, [inner_product_gamma] the γ_n form the C++ evaluates (a tree over n products
    has depth at most n), [inner_product_perturbed_error] the read's case, whose operands carry
    roundings of their own (γ_(n+m)). Part 2 instantiates it with IEEE-754 binary32 rounding to nearest
    (Flocq's FLT format with 24 bits and emin = −149, which has no overflow: the hypothesis the
    generator checks as "no exact state entry above half the largest binary32 number"): u = 2⁻²⁴,
    η₀ = 2⁻¹⁵⁰, the products by Flocq's [error_N_FLT], the additions of two binary32 numbers by
    [FLT_plus_error_N_ex] (exact when the sum is subnormal). *)

From Coq Require Import Reals Lra Lia.
From Flocq Require Import Core Relative Plus_error.
From KalmanOracle Require Import FloatError.
Open Scope R_scope.

(** ** Part 1: the abstract model *)
Section Abstract.

Variable u eta0 : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis eta0_nonneg : 0 <= eta0.

(** A product's rounding: one relative error and one absolute (underflow) error. *)
Definition prod_ok (fl : R -> R) (x : R) : Prop :=
  exists d e, Rabs d <= u /\ Rabs e <= eta0 /\ fl x = x * (1 + d) + e.

(** An addition's rounding: one relative error, no absolute one. *)
Definition sum_ok (fl : R -> R) (x : R) : Prop :=
  exists d, Rabs d <= u /\ fl x = x * (1 + d).

(** A summation tree over products xᵢ yᵢ: any order of the additions. *)
Inductive stree : Type :=
  | SLeaf : R -> R -> stree
  | SNode : stree -> stree -> stree.

Fixpoint exact (t : stree) : R :=
  match t with SLeaf x y => x * y | SNode l r => exact l + exact r end.

(** Σ |xᵢ yᵢ|: the data's size, not ‖x‖‖y‖. *)
Fixpoint sabs (t : stree) : R :=
  match t with SLeaf x y => Rabs (x * y) | SNode l r => sabs l + sabs r end.

Fixpoint leaves (t : stree) : nat :=
  match t with SLeaf _ _ => 1%nat | SNode l r => (leaves l + leaves r)%nat end.

(** Roundings on the longest path from a product to the result: the product's, then one per
    addition above it. *)
Fixpoint depth (t : stree) : nat :=
  match t with SLeaf _ _ => 1%nat | SNode l r => S (Nat.max (depth l) (depth r)) end.

Fixpoint computed (fl : R -> R) (t : stree) : R :=
  match t with
  | SLeaf x y => fl (x * y)
  | SNode l r => fl (computed fl l + computed fl r)
  end.

(** The model holds at every rounding the computation performs. *)
Fixpoint tree_ok (fl : R -> R) (t : stree) : Prop :=
  match t with
  | SLeaf x y => prod_ok fl (x * y)
  | SNode l r => tree_ok fl l /\ tree_ok fl r /\ sum_ok fl (computed fl l + computed fl r)
  end.

Lemma sabs_nonneg : forall t, 0 <= sabs t.
Proof.
  induction t as [x y|l IHl r IHr]; simpl; [apply Rabs_pos | lra].
Qed.

Lemma exact_le_sabs : forall t, Rabs (exact t) <= sabs t.
Proof.
  induction t as [x y|l IHl r IHr]; simpl; [lra|].
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Lemma pow_1pu_ge_1pu : forall k, (1 <= k)%nat -> 1 + u <= (1 + u) ^ k.
Proof.
  intros k Hk. destruct k as [|k]; [lia|]. simpl.
  pose proof (pow_1pu_ge_1 u u_nonneg k). nra.
Qed.

Lemma depth_pos : forall t, (1 <= depth t)%nat.
Proof. destruct t; simpl; lia. Qed.

(** A tree over n products is at most n deep (the sequential order is the deepest). *)
Lemma depth_le_leaves : forall t, (depth t <= leaves t)%nat.
Proof.
  induction t as [x y|l IHl r IHr]; simpl; [lia|].
  pose proof (depth_pos l). pose proof (depth_pos r). lia.
Qed.

(** The error of any summation order, exactly counted: (1 + u)^k − 1 relative to Σ|xᵢyᵢ| and
    (1 + u)^k absolute underflows per product, for any k at least the tree's depth. *)
Theorem inner_product_tree_error : forall fl t, tree_ok fl t -> forall k, (depth t <= k)%nat ->
  Rabs (computed fl t - exact t)
    <= ((1 + u) ^ k - 1) * sabs t + (1 + u) ^ k * INR (leaves t) * eta0.
Proof.
  intros fl t. induction t as [x y|l IHl r IHr]; intros Hok k Hk.
  - (* a product: u|xy| + η₀ *)
    simpl in *. destruct Hok as [d [e [Hd [He Hfl]]]]. rewrite Hfl.
    replace (x * y * (1 + d) + e - x * y) with (x * y * d + e) by ring.
    pose proof (pow_1pu_ge_1pu k Hk). pose proof (Rabs_pos (x * y)).
    eapply Rle_trans; [apply Rabs_triang|].
    rewrite Rabs_mult.
    assert (Rabs (x * y) * Rabs d <= Rabs (x * y) * u) by (apply Rmult_le_compat_l; lra).
    assert (u * Rabs (x * y) <= ((1 + u) ^ k - 1) * Rabs (x * y)) by (apply Rmult_le_compat_r; lra).
    assert (eta0 <= (1 + u) ^ k * 1 * eta0) by nra.
    lra.
  - (* an addition of two computed values *)
    simpl in Hok, Hk. destruct Hok as [Hl [Hr [d [Hd Hfl]]]].
    destruct k as [|k']; [lia|].
    assert (Hkl : (depth l <= k')%nat) by lia. assert (Hkr : (depth r <= k')%nat) by lia.
    specialize (IHl Hl k' Hkl). specialize (IHr Hr k' Hkr).
    set (cl := computed fl l) in *. set (cr := computed fl r) in *.
    simpl computed. fold cl cr. rewrite Hfl. simpl exact. simpl sabs. simpl leaves.
    rewrite plus_INR.
    set (E := (1 + u) ^ k' - 1). set (P := (1 + u) ^ k').
    assert (HP : 1 <= P) by (apply pow_1pu_ge_1; exact u_nonneg).
    pose proof (sabs_nonneg l). pose proof (sabs_nonneg r).
    pose proof (pos_INR (leaves l)). pose proof (pos_INR (leaves r)).
    pose proof (exact_le_sabs l). pose proof (exact_le_sabs r).
    (* |cl + cr| ≤ (1 + E)(Sl + Sr) + P (nl + nr) η₀ *)
    assert (Hsum : Rabs (cl + cr) <= (1 + E) * (sabs l + sabs r)
                                      + P * (INR (leaves l) + INR (leaves r)) * eta0).
    { replace (cl + cr) with ((cl - exact l) + (cr - exact r) + (exact l + exact r)) by ring.
      eapply Rle_trans; [apply Rabs_triang|].
      eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
      eapply Rle_trans; [apply Rplus_le_compat_l, Rabs_triang|].
      unfold E, P in *. lra. }
    replace ((cl + cr) * (1 + d) - (exact l + exact r))
      with ((cl - exact l) + (cr - exact r) + (cl + cr) * d) by ring.
    eapply Rle_trans; [apply Rabs_triang|].
    eapply Rle_trans; [apply Rplus_le_compat_r, Rabs_triang|].
    rewrite Rabs_mult.
    assert (Hd' : Rabs (cl + cr) * Rabs d <= Rabs (cl + cr) * u)
      by (apply Rmult_le_compat_l; [apply Rabs_pos | lra]).
    assert (Hu : Rabs (cl + cr) * u
                 <= ((1 + E) * (sabs l + sabs r) + P * (INR (leaves l) + INR (leaves r)) * eta0) * u)
      by (apply Rmult_le_compat_r; lra).
    replace ((1 + u) ^ S k' - 1) with (E + u * (1 + E)) by (unfold E; simpl; ring).
    replace ((1 + u) ^ S k') with (P + u * P) by (unfold P; simpl; ring).
    unfold E, P in *. nra.
Qed.

(** Higham's γ_n form, as check/delta_rule_bound.hpp evaluates it: n products in any summation
    order are within γ_n Σ|xᵢyᵢ| + (1 + γ_n) n η₀ of the exact inner product. *)
Theorem inner_product_gamma : forall fl t n, tree_ok fl t -> leaves t = n -> INR n * u < 1 ->
  Rabs (computed fl t - exact t)
    <= INR n * u / (1 - INR n * u) * sabs t + (1 + INR n * u / (1 - INR n * u)) * INR n * eta0.
Proof.
  intros fl t n Hok Hn Hnu.
  pose proof (inner_product_tree_error fl t Hok n ltac:(rewrite <- Hn; apply depth_le_leaves)) as H.
  rewrite Hn in H.
  (* (1 + u)^n − 1 ≤ γ_n: FloatError.pow_le_gamma. *)
  pose proof (pow_le_gamma u u_nonneg n Hnu) as Hg.
  pose proof (sabs_nonneg t). pose proof (pos_INR n).
  assert (0 <= INR n * eta0) by (apply Rmult_le_pos; assumption).
  assert (((1 + u) ^ n - 1) * sabs t <= INR n * u / (1 - INR n * u) * sabs t)
    by (apply Rmult_le_compat_r; assumption).
  assert ((1 + u) ^ n * INR n * eta0 <= (1 + INR n * u / (1 - INR n * u)) * INR n * eta0).
  { rewrite !Rmult_assoc. apply Rmult_le_compat_r; [assumption | lra]. }
  lra.
Qed.

(** *** Operands rounded before the inner product (the read ô = fl(Σᵢ fl(τ̂ qᵢ) sᵢ))

    When each product's first operand is itself a computed x̃ᵢ = xᵢ θᵢ with m roundings of its own
    (|x̃ᵢyᵢ − xᵢyᵢ| ≤ ((1 + u)^m − 1)|xᵢyᵢ|; the read's fl(τ̂ qᵢ): τ̂ = 1/√K rounded twice, the product
    once, m = 3), the counts add: ((1 + u)^(k + m) − 1) relative to the exact Σ|xᵢyᵢ|. *)

(** [perturbed m t' t]: the same tree, each product of t' within m roundings of t's. *)
Fixpoint perturbed (m : nat) (t' t : stree) : Prop :=
  match t', t with
  | SLeaf x' y', SLeaf x y => Rabs (x' * y' - x * y) <= ((1 + u) ^ m - 1) * Rabs (x * y)
  | SNode l' r', SNode l r => perturbed m l' l /\ perturbed m r' r
  | _, _ => False
  end.

Lemma perturbed_shape : forall m t' t, perturbed m t' t -> leaves t' = leaves t /\ depth t' = depth t.
Proof.
  intros m t'. induction t' as [x' y'|l' IHl r' IHr]; intros [x y|l r] H; simpl in *; try contradiction; auto.
  destruct H as [Hl Hr]. destruct (IHl l Hl), (IHr r Hr). split; lia.
Qed.

Lemma perturbed_exact : forall m t' t, perturbed m t' t ->
  Rabs (exact t' - exact t) <= ((1 + u) ^ m - 1) * sabs t /\ sabs t' <= (1 + u) ^ m * sabs t.
Proof.
  intros m t'. induction t' as [x' y'|l' IHl r' IHr]; intros [x y|l r] H; simpl in *; try contradiction.
  - split; [exact H|].
    pose proof (Rabs_triang_inv (x' * y') (x * y)). lra.
  - destruct H as [Hl Hr]. destruct (IHl l Hl) as [Hl1 Hl2]. destruct (IHr r Hr) as [Hr1 Hr2].
    split; [|lra].
    replace (exact l' + exact r' - (exact l + exact r)) with ((exact l' - exact l) + (exact r' - exact r))
      by ring.
    eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

Theorem inner_product_perturbed_error : forall fl m t' t, tree_ok fl t' -> perturbed m t' t ->
  Rabs (computed fl t' - exact t)
    <= ((1 + u) ^ (depth t + m) - 1) * sabs t + (1 + u) ^ depth t * INR (leaves t) * eta0.
Proof.
  intros fl m t' t Hok Hp.
  destruct (perturbed_shape m t' t Hp) as [Hn Hd].
  destruct (perturbed_exact m t' t Hp) as [He Hs].
  pose proof (inner_product_tree_error fl t' Hok (depth t) ltac:(lia)) as H.
  rewrite Hn in H.
  pose proof (sabs_nonneg t). pose proof (sabs_nonneg t').
  pose proof (pow_1pu_ge_1 u u_nonneg (depth t)). pose proof (pow_1pu_ge_1 u u_nonneg m).
  rewrite pow_add.
  replace (computed fl t' - exact t) with ((computed fl t' - exact t') + (exact t' - exact t)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  assert (((1 + u) ^ depth t - 1) * sabs t' <= ((1 + u) ^ depth t - 1) * ((1 + u) ^ m * sabs t))
    by (apply Rmult_le_compat_l; lra).
  nra.
Qed.

End Abstract.

(** ** Part 2: IEEE-754 binary32, round to nearest *)
Section Binary32.

Variable choice : Z -> bool.

Local Instance prec24_gt_0 : Prec_gt_0 24.
Proof. unfold Prec_gt_0. lia. Qed.

Definition fmt32 : R -> Prop := generic_format radix2 (FLT_exp (-149) 24).
Definition rnd32 (x : R) : R := round radix2 (FLT_exp (-149) 24) (Znearest choice) x.

Definition u32 : R := bpow radix2 (-24).
Definition eta32 : R := bpow radix2 (-150).

Lemma u32_half : / 2 * bpow radix2 (- (24) + 1) = u32.
Proof.
  unfold u32. replace (- (24) + 1)%Z with (1 + -24)%Z by lia.
  rewrite bpow_plus. change (bpow radix2 1) with 2. field.
Qed.

Lemma eta32_half : / 2 * bpow radix2 (-149) = eta32.
Proof.
  unfold eta32. replace (-149)%Z with (1 + -150)%Z by lia.
  rewrite bpow_plus. change (bpow radix2 1) with 2. field.
Qed.

(** Every binary32 product (no overflow: FLT has no largest exponent) obeys the model. *)
Lemma rnd32_prod_ok : forall x, prod_ok u32 eta32 rnd32 x.
Proof.
  intros x. destruct (error_N_FLT radix2 (-149) 24 ltac:(lia) choice x)
    as [eps [eta [Heps [Heta [_ Hr]]]]].
  exists eps, eta. rewrite u32_half in Heps. rewrite eta32_half in Heta. auto.
Qed.

(** The sum of two binary32 numbers rounds with a relative error only (exact when subnormal). *)
Lemma rnd32_sum_ok : forall a b, fmt32 a -> fmt32 b -> sum_ok u32 rnd32 (a + b).
Proof.
  intros a b Ha Hb.
  destruct (FLT_plus_error_N_ex radix2 (-149) 24 choice a b Ha Hb) as [eps [Heps Hr]].
  exists eps. split; [|exact Hr].
  eapply Rle_trans; [exact Heps|].
  assert (Hu : u_ro radix2 24 = u32).
  { unfold u_ro. rewrite <- u32_half. replace (1 - 24)%Z with (- (24) + 1)%Z by lia. reflexivity. }
  rewrite Hu. assert (0 < u32) by apply bpow_gt_0.
  apply Rmult_le_reg_r with (1 + u32); [lra|].
  unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. nra.
Qed.

Lemma computed_fmt32 : forall t, fmt32 (computed rnd32 t).
Proof.
  destruct t; simpl; apply generic_format_round; typeclasses eauto.
Qed.

Lemma rnd32_tree_ok : forall t, tree_ok u32 eta32 rnd32 t.
Proof.
  induction t as [x y|l IHl r IHr]; simpl; [apply rnd32_prod_ok|].
  repeat split; auto. apply rnd32_sum_ok; apply computed_fmt32.
Qed.

(** The bound of the C++ (check/delta_rule_bound.hpp, the inner product's |ε₂|), for binary32:
    any n binary32 products in any summation order, n 2⁻²⁴ < 1. *)
Theorem binary32_inner_product : forall t n, leaves t = n -> INR n * u32 < 1 ->
  Rabs (computed rnd32 t - exact t)
    <= INR n * u32 / (1 - INR n * u32) * sabs t + (1 + INR n * u32 / (1 - INR n * u32)) * INR n * eta32.
Proof.
  intros t n Hn Hnu.
  apply (inner_product_gamma u32 eta32); auto.
  - apply bpow_ge_0.
  - apply bpow_ge_0.
  - apply rnd32_tree_ok.
Qed.

(** The read's sum in binary32: operands with m roundings of their own (m = 3 for fl(τ̂ qᵢ)), n
    products in any order: within γ_(n+m) Σ|xᵢyᵢ| + (1 + γ_n) n η₀ of the exact Σ xᵢyᵢ, the
    γ_{K+3} τ Σᵢ|qᵢsᵢ| term of the outputs' bound in check/delta_rule_bound.hpp (the state's own
    error e_t is added there separately). *)
Theorem binary32_inner_product_rounded_operands : forall t' t n m,
  perturbed u32 m t' t -> leaves t = n -> INR (n + m) * u32 < 1 ->
  Rabs (computed rnd32 t' - exact t)
    <= INR (n + m) * u32 / (1 - INR (n + m) * u32) * sabs t
       + (1 + INR n * u32 / (1 - INR n * u32)) * INR n * eta32.
Proof.
  intros t' t n m Hp Hn Hnu.
  assert (Hu : 0 <= u32) by apply bpow_ge_0. assert (He : 0 <= eta32) by apply bpow_ge_0.
  pose proof (inner_product_perturbed_error u32 eta32 Hu He rnd32 m t' t (rnd32_tree_ok t') Hp) as H.
  rewrite Hn in H.
  assert (Hd : (depth t <= n)%nat) by (rewrite <- Hn; apply depth_le_leaves).
  assert (Hnu' : INR n * u32 < 1).
  { rewrite plus_INR in Hnu. pose proof (pos_INR m). nra. }
  pose proof (pow_le_gamma u32 Hu (n + m) Hnu) as G1.
  pose proof (pow_le_gamma u32 Hu n Hnu') as G2.
  assert (P1 : (1 + u32) ^ (depth t + m) <= (1 + u32) ^ (n + m)) by (apply Rle_pow; [lra | lia]).
  assert (P2 : (1 + u32) ^ depth t <= (1 + u32) ^ n) by (apply Rle_pow; [lra | lia]).
  pose proof (sabs_nonneg t). pose proof (pos_INR n).
  assert (0 <= INR n * eta32) by (apply Rmult_le_pos; assumption).
  assert (((1 + u32) ^ (depth t + m) - 1) * sabs t
          <= INR (n + m) * u32 / (1 - INR (n + m) * u32) * sabs t) by (apply Rmult_le_compat_r; lra).
  assert ((1 + u32) ^ depth t * INR n * eta32 <= (1 + INR n * u32 / (1 - INR n * u32)) * INR n * eta32).
  { rewrite !Rmult_assoc. apply Rmult_le_compat_r; [assumption | lra]. }
  lra.
Qed.

End Binary32.
