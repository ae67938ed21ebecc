(** * Rounding error of Möbius products: docs/math.md §8 fact 4 (the crude bound);
    docs/math.md "Error bounds of the scans".

    Part 1 is an abstract model: [fl] is any function on the reals, and [fl_ok fl x] says that
    at the point x it commits one relative error of at most u: fl x = x (1 + δ), |δ| ≤ u.
    Part 2 instantiates it with Flocq's rounding to nearest in FLX (precision p, unbounded
    exponent range: no underflow, no overflow), where [fl_ok] holds everywhere.  Part 3 ties it
    to IEEE-754 binary32 ([binary_float 24 128], round to nearest even): one operation is
    such a rounding when its exact result is zero or normal (|x| ≥ 2⁻¹²⁶) and does not
    overflow. *)

From Coq Require Import Reals Lra Lia List.
From Flocq Require Import Core Relative BinarySingleNaN.
From KalmanOracle Require Import Mobius.
Open Scope R_scope.

(** ** Part 1: the abstract model *)
Section Abstract.

Variable u : R.
Hypothesis u_nonneg : 0 <= u.
Hypothesis u_lt_1 : u < 1.

Definition fl_ok (fl : R -> R) (x : R) : Prop :=
  exists d, Rabs d <= u /\ fl x = x * (1 + d).

(** [within k x y]: y = x · θ with θ ∈ [(1 − u)^k, (1 + u)^k] (x ≥ 0): "k roundings". *)
Definition within (k : nat) (x y : R) : Prop := (1 - u) ^ k * x <= y <= (1 + u) ^ k * x.

Lemma pow_1mu_nonneg : forall k, 0 <= (1 - u) ^ k.
Proof. intros; apply pow_le; lra. Qed.
Lemma pow_1mu_pos : forall k, 0 < (1 - u) ^ k.
Proof. intros; apply pow_lt; lra. Qed.
Lemma pow_1pu_pos : forall k, 0 < (1 + u) ^ k.
Proof. intros; apply pow_lt; lra. Qed.
Lemma pow_1mu_le_1 : forall k, (1 - u) ^ k <= 1.
Proof.
  intros k.
  apply Rle_trans with (1 ^ k); [apply pow_incr; split; lra|rewrite pow1; lra].
Qed.
Lemma pow_1pu_ge_1 : forall k, 1 <= (1 + u) ^ k.
Proof.
  intros k.
  apply Rle_trans with (1 ^ k); [rewrite pow1; lra|apply pow_incr; split; lra].
Qed.

Lemma within_nonneg : forall k x y, 0 <= x -> within k x y -> 0 <= y.
Proof.
  intros k x y Hx [H _]. pose proof (pow_1mu_nonneg k).
  eapply Rle_trans; [|exact H]. apply Rmult_le_pos; assumption.
Qed.

Lemma within_refl : forall x, within 0 x x.
Proof. intros; unfold within; simpl; lra. Qed.

Lemma within_mono : forall k k' x y, (k <= k')%nat -> 0 <= x -> within k x y -> within k' x y.
Proof.
  intros k k' x y Hk Hx [H1 H2]. replace k' with (k + (k' - k))%nat in * by lia.
  set (d := (k' - k)%nat). unfold within. rewrite !pow_add.
  pose proof (pow_1mu_le_1 d). pose proof (pow_1pu_ge_1 d).
  pose proof (pow_1mu_nonneg k). pose proof (pow_1pu_pos k).
  split.
  - eapply Rle_trans; [|exact H1]. rewrite Rmult_assoc.
    apply Rmult_le_compat_l; [assumption|]. rewrite <- (Rmult_1_l x) at 2.
    apply Rmult_le_compat_r; assumption.
  - eapply Rle_trans; [exact H2|]. rewrite Rmult_assoc.
    apply Rmult_le_compat_l; [lra|]. rewrite <- (Rmult_1_l x) at 1.
    apply Rmult_le_compat_r; assumption.
Qed.

Lemma within_mul : forall k1 k2 x y x' y', 0 <= x -> 0 <= y ->
  within k1 x x' -> within k2 y y' -> within (k1 + k2) (x * y) (x' * y').
Proof.
  intros k1 k2 x y x' y' Hx Hy [H1 H2] [H3 H4].
  pose proof (pow_1mu_nonneg k1). pose proof (pow_1mu_nonneg k2).
  pose proof (pow_1pu_pos k1). pose proof (pow_1pu_pos k2).
  assert (0 <= (1 - u) ^ k1 * x) by (apply Rmult_le_pos; assumption).
  assert (0 <= (1 - u) ^ k2 * y) by (apply Rmult_le_pos; assumption).
  unfold within. rewrite !pow_add. split.
  - replace ((1 - u) ^ k1 * (1 - u) ^ k2 * (x * y))
      with (((1 - u) ^ k1 * x) * ((1 - u) ^ k2 * y)) by ring.
    apply Rmult_le_compat; assumption.
  - replace ((1 + u) ^ k1 * (1 + u) ^ k2 * (x * y))
      with (((1 + u) ^ k1 * x) * ((1 + u) ^ k2 * y)) by ring.
    apply Rmult_le_compat; lra.
Qed.

Lemma within_add : forall k x y x' y', within k x x' -> within k y y' -> within k (x + y) (x' + y').
Proof. intros k x y x' y' [H1 H2] [H3 H4]; unfold within; split; nra. Qed.

Lemma within_round : forall fl k x y, 0 <= x -> within k x y -> fl_ok fl y -> within (S k) x (fl y).
Proof.
  intros fl k x y Hx Hw [d [Hd ->]]. apply Rabs_le_inv in Hd.
  pose proof (within_nonneg k x y Hx Hw) as Hy. destruct Hw as [H1 H2].
  pose proof (pow_1mu_nonneg k).
  unfold within; simpl. split.
  - replace ((1 - u) * (1 - u) ^ k * x) with (((1 - u) ^ k * x) * (1 - u)) by ring.
    apply Rmult_le_compat; [apply Rmult_le_pos; assumption|lra|assumption|lra].
  - replace ((1 + u) * (1 + u) ^ k * x) with (((1 + u) ^ k * x) * (1 + u)) by ring.
    apply Rmult_le_compat; [assumption|lra|assumption|lra].
Qed.

(** From the sandwich to a relative error: |y − x| ≤ ((1 + u)^k − 1) x. *)
Lemma pow_sum_ge_2 : forall k, 2 <= (1 + u) ^ k + (1 - u) ^ k.
Proof.
  induction k as [|k IH]; simpl; [lra|].
  assert ((1 - u) ^ k <= (1 + u) ^ k) by (apply pow_incr; split; lra).
  nra.
Qed.

Theorem within_relative : forall k x y, 0 <= x -> within k x y ->
  Rabs (y - x) <= ((1 + u) ^ k - 1) * x.
Proof.
  intros k x y Hx [H1 H2]. pose proof (pow_sum_ge_2 k).
  apply Rabs_le. split; nra.
Qed.

(** Higham's γ_k: (1 + u)^k − 1 ≤ k u / (1 − k u) when k u < 1. *)
Theorem pow_le_gamma : forall k, INR k * u < 1 -> (1 + u) ^ k - 1 <= INR k * u / (1 - INR k * u).
Proof.
  assert (H : forall k, INR k * u < 1 -> (1 + u) ^ k * (1 - INR k * u) <= 1).
  { induction k as [|k IH]; intros Hk; [simpl; lra|].
    rewrite S_INR in *. simpl pow.
    assert (Hk' : INR k * u < 1) by (pose proof (pos_INR k); nra).
    specialize (IH Hk').
    assert (0 <= (1 + u) ^ k) by (apply pow_le; lra).
    assert ((1 + u) * (1 + u) ^ k * (1 - (INR k + 1) * u)
            = (1 + u) ^ k * (1 - INR k * u) - (1 + u) ^ k * u * (u * (INR k + 1))) by ring.
    assert (0 <= (1 + u) ^ k * u * (u * (INR k + 1))).
    { apply Rmult_le_pos; [apply Rmult_le_pos; assumption|].
      apply Rmult_le_pos; [assumption|]. pose proof (pos_INR k); lra. }
    lra. }
  intros k Hk. specialize (H k Hk).
  apply (Rmult_le_reg_r (1 - INR k * u)); [lra|].
  unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. nra.
Qed.

(** *** One compose in floating point *)

(** Each entry: fl(fl(x_i1 y_1j) + fl(x_i2 y_2j)), as [mobius_compose] in binary32. *)
Definition fl_dot (fl : R -> R) (x1 y1 x2 y2 : R) : R := fl (fl (x1 * y1) + fl (x2 * y2)).

Definition fl_compose (fl : R -> R) (l e : mob) : mob :=
  Mobius (fl_dot fl (ma l) (ma e) (mb l) (mc e)) (fl_dot fl (ma l) (mb e) (mb l) (md e))
         (fl_dot fl (mc l) (ma e) (md l) (mc e)) (fl_dot fl (mc l) (mb e) (md l) (md e)).

Definition dot_ok (fl : R -> R) (x1 y1 x2 y2 : R) : Prop :=
  fl_ok fl (x1 * y1) /\ fl_ok fl (x2 * y2) /\ fl_ok fl (fl (x1 * y1) + fl (x2 * y2)).

(** The three operations of every entry commit at most one relative error u each. *)
Definition compose_ok (fl : R -> R) (l e : mob) : Prop :=
  dot_ok fl (ma l) (ma e) (mb l) (mc e) /\ dot_ok fl (ma l) (mb e) (mb l) (md e) /\
  dot_ok fl (mc l) (ma e) (md l) (mc e) /\ dot_ok fl (mc l) (mb e) (md l) (md e).

Definition mwithin (k : nat) (m m' : mob) : Prop :=
  within k (ma m) (ma m') /\ within k (mb m) (mb m') /\
  within k (mc m) (mc m') /\ within k (md m) (md m').

Lemma mwithin_refl : forall m, mwithin 0 m m.
Proof. intros m; split; [|split; [|split]]; apply within_refl. Qed.

Lemma fl_dot_within : forall fl k1 k2 x1 y1 x2 y2 x1' y1' x2' y2',
  0 <= x1 -> 0 <= y1 -> 0 <= x2 -> 0 <= y2 ->
  within k1 x1 x1' -> within k2 y1 y1' -> within k1 x2 x2' -> within k2 y2 y2' ->
  dot_ok fl x1' y1' x2' y2' ->
  within (k1 + k2 + 2) (x1 * y1 + x2 * y2) (fl_dot fl x1' y1' x2' y2').
Proof.
  intros fl k1 k2 x1 y1 x2 y2 x1' y1' x2' y2' H1 H2 H3 H4 W1 W2 W3 W4 [O1 [O2 O3]].
  unfold fl_dot. replace (k1 + k2 + 2)%nat with (S (S (k1 + k2))) by lia.
  apply within_round; [apply Rplus_le_le_0_compat; apply Rmult_le_pos; assumption| |exact O3].
  apply within_add.
  - apply within_round; [apply Rmult_le_pos; assumption| |exact O1]. apply within_mul; assumption.
  - apply within_round; [apply Rmult_le_pos; assumption| |exact O2]. apply within_mul; assumption.
Qed.

(** A compose of two non-negative matrices computed with k₁ and k₂ roundings per entry has
    k₁ + k₂ + 2 per entry: no cancellation, every term keeps its sign. *)
Theorem fl_compose_within : forall fl k1 k2 l e l' e',
  nonneg l -> nonneg e -> mwithin k1 l l' -> mwithin k2 e e' -> compose_ok fl l' e' ->
  mwithin (k1 + k2 + 2) (compose l e) (fl_compose fl l' e').
Proof.
  intros fl k1 k2 l e l' e' (?&?&?&?) (?&?&?&?) (?&?&?&?) (?&?&?&?) (?&?&?&?).
  rewrite compose_entries. unfold mwithin, fl_compose; simpl.
  repeat split; apply fl_dot_within; assumption.
Qed.

(** One compose of exact non-negative inputs: each entry is within [(1−u)², (1+u)²] of the
    exact a·e + b·g, so |error| ≤ ((1+u)² − 1)·exact = (2u + u²)·exact. *)
Theorem fl_compose_one : forall fl l e, nonneg l -> nonneg e -> compose_ok fl l e ->
  mwithin 2 (compose l e) (fl_compose fl l e).
Proof.
  intros fl l e Hl He Hok.
  apply (fl_compose_within fl 0 0); try assumption; apply mwithin_refl.
Qed.

Theorem fl_compose_one_relative : forall fl l e i j, (i < 2)%nat -> (j < 2)%nat ->
  nonneg l -> nonneg e -> compose_ok fl l e ->
  Rabs (entry (fl_compose fl l e) i j - entry (compose l e) i j)
  <= ((1 + u) ^ 2 - 1) * entry (compose l e) i j.
Proof.
  intros fl l e i j Hi Hj Hl He Hok.
  pose proof (fl_compose_one fl l e Hl He Hok) as (W1&W2&W3&W4).
  pose proof (nonneg_compose l e Hl He) as (N1&N2&N3&N4).
  destruct i as [|[|i]]; [| |lia]; destruct j as [|[|j]]; try lia;
    apply within_relative; assumption.
Qed.

(** *** Any product of n leaves, in any evaluation order *)

(** A binary tree of composes (later subtree on the left); a leaf carries the exact leaf,
    the leaf as computed, and how many roundings its entries carry (0 for leaves that are
    exactly representable; e.g. 4 for a KLA leaf formed in binary32, docs/math.md). *)
Inductive ptree :=
  | PLeaf (exact computed : mob) (k : nat)
  | PNode (later earlier : ptree).

Fixpoint texact (t : ptree) : mob :=
  match t with
  | PLeaf m _ _ => m
  | PNode l e => compose (texact l) (texact e)
  end.

Fixpoint tfl (fl : R -> R) (t : ptree) : mob :=
  match t with
  | PLeaf _ m _ => m
  | PNode l e => fl_compose fl (tfl fl l) (tfl fl e)
  end.

Fixpoint nleaves (t : ptree) : nat :=
  match t with
  | PLeaf _ _ _ => 1
  | PNode l e => nleaves l + nleaves e
  end.

Fixpoint kleaves (t : ptree) : nat :=
  match t with
  | PLeaf _ _ k => k
  | PNode l e => kleaves l + kleaves e
  end.

Fixpoint leaves_ok (t : ptree) : Prop :=
  match t with
  | PLeaf m m' k => nonneg m /\ mwithin k m m'
  | PNode l e => leaves_ok l /\ leaves_ok e
  end.

Fixpoint tree_ok (fl : R -> R) (t : ptree) : Prop :=
  match t with
  | PLeaf _ _ _ => True
  | PNode l e => tree_ok fl l /\ tree_ok fl e /\ compose_ok fl (tfl fl l) (tfl fl e)
  end.

Lemma nleaves_pos : forall t, (1 <= nleaves t)%nat.
Proof. induction t; simpl; lia. Qed.

Lemma texact_nonneg : forall t, leaves_ok t -> nonneg (texact t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros H; [apply H|].
  apply nonneg_compose; [apply IHl|apply IHe]; apply H.
Qed.

(** The computed product of n non-negative leaves is, entrywise, the exact product times a
    factor in [(1−u)^K, (1+u)^K] with K = Σ(leaf roundings) + 2(n − 1), whatever the tree. *)
Theorem tree_within : forall fl t, leaves_ok t -> tree_ok fl t ->
  mwithin (kleaves t + 2 * (nleaves t - 1)) (texact t) (tfl fl t).
Proof.
  intros fl t; induction t as [m m' k|l IHl e IHe]; intros Hl Ht.
  - simpl. replace (k + 0)%nat with k by lia. apply Hl.
  - destruct Hl as [Hll Hle]. destruct Ht as [Htl [Hte Hc]].
    pose proof (nleaves_pos l). pose proof (nleaves_pos e).
    cbn [texact tfl kleaves nleaves]. replace (kleaves l + kleaves e + 2 * (nleaves l + nleaves e - 1))%nat
      with ((kleaves l + 2 * (nleaves l - 1)) + (kleaves e + 2 * (nleaves e - 1)) + 2)%nat
      by lia.
    apply fl_compose_within; auto using texact_nonneg.
Qed.

Theorem tree_relative : forall fl t i j, (i < 2)%nat -> (j < 2)%nat ->
  leaves_ok t -> tree_ok fl t ->
  Rabs (entry (tfl fl t) i j - entry (texact t) i j)
  <= ((1 + u) ^ (kleaves t + 2 * (nleaves t - 1)) - 1) * entry (texact t) i j.
Proof.
  intros fl t i j Hi Hj Hl Ht.
  pose proof (tree_within fl t Hl Ht) as (W1&W2&W3&W4).
  pose proof (texact_nonneg t Hl) as (N1&N2&N3&N4).
  destruct i as [|[|i]]; [| |lia]; destruct j as [|[|j]]; try lia;
    apply within_relative; assumption.
Qed.

Lemma div_le_compat : forall n1 n2 d1 d2, 0 <= n1 -> n1 <= n2 -> 0 < d2 -> d2 <= d1 ->
  n1 / d1 <= n2 / d2.
Proof.
  intros. unfold Rdiv. apply Rmult_le_compat; try lra.
  - apply Rlt_le, Rinv_0_lt_compat; lra.
  - apply Rinv_le_contravar; lra.
Qed.

(** *** Zero patterns and the projective comparison of two evaluation orders *)

(** A computed entry is zero exactly when the exact one is. *)
Theorem within_zero : forall k x y, 0 <= x -> within k x y -> (y = 0 <-> x = 0).
Proof.
  intros k x y Hx [H1 H2]. pose proof (pow_1mu_pos k). pose proof (pow_1pu_pos k).
  split; intros Hz.
  - subst y. destruct (Rle_lt_or_eq_dec 0 x Hx) as [Hp|He]; [|auto].
    exfalso. assert (0 < (1 - u) ^ k * x) by (apply Rmult_lt_0_compat; assumption). lra.
  - subst x. rewrite Rmult_0_r in *. lra.
Qed.

Lemma pow_div : forall a b k, b <> 0 -> (a / b) ^ k = a ^ k / b ^ k.
Proof.
  intros a b k Hb; induction k as [|k IH]; simpl; [field|].
  rewrite IH. field. split; [apply pow_nonzero; exact Hb|exact Hb].
Qed.

(** Two computations of one exact value x > 0, each with k roundings, differ by a factor in
    [((1−u)/(1+u))^k, ((1+u)/(1−u))^k]. *)
Theorem within_ratio : forall k x y z, 0 < x -> within k x y -> within k x z ->
  ((1 - u) / (1 + u)) ^ k <= y / z <= ((1 + u) / (1 - u)) ^ k.
Proof.
  intros k x y z Hx [Y1 Y2] [Z1 Z2].
  pose proof (pow_1mu_pos k). pose proof (pow_1pu_pos k).
  assert (Hz : 0 < z) by (eapply Rlt_le_trans; [|exact Z1]; apply Rmult_lt_0_compat; assumption).
  rewrite !pow_div by lra. split.
  - replace ((1 - u) ^ k / (1 + u) ^ k) with (((1 - u) ^ k * x) / ((1 + u) ^ k * x))
      by (field; lra).
    apply div_le_compat; try assumption. apply Rmult_le_pos; lra.
  - replace ((1 + u) ^ k / (1 - u) ^ k) with (((1 + u) ^ k * x) / ((1 - u) ^ k * x))
      by (field; lra).
    apply div_le_compat; try assumption.
    + eapply Rle_trans; [|exact Y1]. apply Rmult_le_pos; lra.
    + apply Rmult_lt_0_compat; assumption.
Qed.

(** The cross ratio R = (S_e F_f)/(F_e S_f) of two computations S, F of the same exact
    product, for two entries e, f with positive exact values, cancels any common positive
    factor (a rescaling) and satisfies ((1−u)/(1+u))^{2K} ≤ R ≤ ((1+u)/(1−u))^{2K}, i.e.
    |log R| ≤ 2K log((1+u)/(1−u)) (docs/math.md, "schedule against fold, projectively"). *)
Theorem cross_ratio_bound : forall k pe pf se sf fe ff, 0 < pe -> 0 < pf ->
  within k pe se -> within k pf sf -> within k pe fe -> within k pf ff ->
  ((1 - u) / (1 + u)) ^ (2 * k) <= (se * ff) / (fe * sf) <= ((1 + u) / (1 - u)) ^ (2 * k).
Proof.
  intros k pe pf se sf fe ff Hpe Hpf Ws Wsf Wf Wff.
  pose proof (within_ratio k pe se fe Hpe Ws Wf) as [A1 A2].
  pose proof (within_ratio k pf ff sf Hpf Wff Wsf) as [B1 B2].
  assert (Hsf : 0 < sf).
  { destruct Wsf as [H _]. eapply Rlt_le_trans; [|exact H].
    apply Rmult_lt_0_compat; [apply pow_1mu_pos|exact Hpf]. }
  assert (Hfe : 0 < fe).
  { destruct Wf as [H _]. eapply Rlt_le_trans; [|exact H].
    apply Rmult_lt_0_compat; [apply pow_1mu_pos|exact Hpe]. }
  replace ((se * ff) / (fe * sf)) with ((se / fe) * (ff / sf)) by (field; lra).
  replace (2 * k)%nat with (k + k)%nat by lia. rewrite !pow_add.
  assert (0 <= ((1 - u) / (1 + u)) ^ k) by (apply pow_le; unfold Rdiv;
    apply Rmult_le_pos; [lra|apply Rlt_le, Rinv_0_lt_compat; lra]).
  split; apply Rmult_le_compat; lra.
Qed.

(** For two evaluation trees with the same exact product (a schedule's output and the
    fold's) and at most K roundings per entry each, every cross ratio of two positive
    entries is within ((1∓u)/(1±u))^{2K}. *)
Theorem tree_cross_ratio : forall fl t1 t2 K i j i' j',
  (i < 2)%nat -> (j < 2)%nat -> (i' < 2)%nat -> (j' < 2)%nat ->
  texact t1 = texact t2 -> leaves_ok t1 -> leaves_ok t2 -> tree_ok fl t1 -> tree_ok fl t2 ->
  (kleaves t1 + 2 * (nleaves t1 - 1) <= K)%nat -> (kleaves t2 + 2 * (nleaves t2 - 1) <= K)%nat ->
  0 < entry (texact t1) i j -> 0 < entry (texact t1) i' j' ->
  let S := tfl fl t1 in let F := tfl fl t2 in
  ((1 - u) / (1 + u)) ^ (2 * K)
  <= (entry S i j * entry F i' j') / (entry F i j * entry S i' j')
  <= ((1 + u) / (1 - u)) ^ (2 * K).
Proof.
  intros fl t1 t2 K i j i' j' Hi Hj Hi' Hj' Heq Hl1 Hl2 Ht1 Ht2 HK1 HK2 He Hf S F.
  assert (W : forall t, leaves_ok t -> tree_ok fl t -> (kleaves t + 2 * (nleaves t - 1) <= K)%nat ->
            forall a b, (a < 2)%nat -> (b < 2)%nat ->
            within K (entry (texact t) a b) (entry (tfl fl t) a b)).
  { intros t Hl Ht HK a b Ha Hb.
    pose proof (tree_within fl t Hl Ht) as (W1&W2&W3&W4).
    pose proof (texact_nonneg t Hl) as (N1&N2&N3&N4).
    destruct a as [|[|a]]; [| |lia]; destruct b as [|[|b]]; try lia;
      (eapply within_mono; [exact HK| |]; assumption). }
  apply cross_ratio_bound with (pe := entry (texact t1) i j) (pf := entry (texact t1) i' j');
    try assumption.
  - apply W; assumption.
  - apply W; assumption.
  - rewrite Heq. apply W; assumption.
  - rewrite Heq. apply W; assumption.
Qed.

(** *** Applying a computed map to x *)

(** fl(fl(fl(a x) + b) / fl(fl(c x) + d)), as [mobius_apply]. *)
Definition fl_apply (fl : R -> R) (m : mob) (x : R) : R :=
  fl (fl (fl (ma m * x) + mb m) / fl (fl (mc m * x) + md m)).

Definition apply_ok (fl : R -> R) (m : mob) (x : R) : Prop :=
  fl_ok fl (ma m * x) /\ fl_ok fl (fl (ma m * x) + mb m) /\
  fl_ok fl (mc m * x) /\ fl_ok fl (fl (mc m * x) + md m) /\
  fl_ok fl (fl (fl (ma m * x) + mb m) / fl (fl (mc m * x) + md m)).

Lemma within_mul_exact : forall k a a' x, 0 <= a -> 0 <= x -> within k a a' ->
  within k (a * x) (a' * x).
Proof.
  intros k a a' x Ha Hx W.
  pose proof (within_mul k 0 a x a' x Ha Hx W (within_refl x)) as H.
  rewrite Nat.add_0_r in H. exact H.
Qed.

(** fl(fl(a' x) + b') for a', b' within k of a, b ≥ 0 and an exact x ≥ 0: within k + 2. *)
Lemma fl_lin_within : forall fl k a b a' b' x, 0 <= a -> 0 <= b -> 0 <= x ->
  within k a a' -> within k b b' -> fl_ok fl (a' * x) -> fl_ok fl (fl (a' * x) + b') ->
  within (k + 2) (a * x + b) (fl (fl (a' * x) + b')).
Proof.
  intros fl k a b a' b' x Ha Hb Hx Wa Wb O1 O2.
  replace (k + 2)%nat with (S (S k)) by lia.
  apply within_round; [apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]; assumption| |exact O2].
  apply within_add.
  - apply within_round; [apply Rmult_le_pos; assumption| |exact O1].
    apply within_mul_exact; assumption.
  - apply (within_mono k); [lia|assumption|exact Wb].
Qed.

(** A map whose entries carry k roundings, applied to an exact x ≥ 0 with c x + d > 0:
    the computed value is the exact one times a factor in
    [(1−u)^{k+3} / (1+u)^{k+2}, (1+u)^{k+3} / (1−u)^{k+2}]. *)
Theorem fl_apply_bound : forall fl k m m' x,
  nonneg m -> 0 <= x -> 0 < den m x -> mwithin k m m' -> apply_ok fl m' x ->
  (1 - u) ^ (k + 3) / (1 + u) ^ (k + 2) * apply m x <= fl_apply fl m' x <=
  (1 + u) ^ (k + 3) / (1 - u) ^ (k + 2) * apply m x.
Proof.
  intros fl k m m' x (Ha&Hb&Hc&Hd) Hx Hden (Wa&Wb&Wc&Wd) (O1&O2&O3&O4&O5).
  unfold den in Hden.
  assert (WN : within (k + 2) (ma m * x + mb m) (fl (fl (ma m' * x) + mb m'))).
  { replace (k + 2)%nat with (S (S k)) by lia.
    apply within_round; [apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]; assumption| |exact O2].
    apply within_add.
    - apply within_round; [apply Rmult_le_pos; assumption| |exact O1].
      apply within_mul_exact; assumption.
    - apply (within_mono k); [lia|assumption|exact Wb]. }
  assert (WD : within (k + 2) (mc m * x + md m) (fl (fl (mc m' * x) + md m'))).
  { replace (k + 2)%nat with (S (S k)) by lia.
    apply within_round; [lra| |exact O4].
    apply within_add.
    - apply within_round; [apply Rmult_le_pos; assumption| |exact O3].
      apply within_mul_exact; assumption.
    - apply (within_mono k); [lia|assumption|exact Wd]. }
  set (N := ma m * x + mb m) in *. set (D := mc m * x + md m) in *.
  set (N' := fl (fl (ma m' * x) + mb m')) in *. set (D' := fl (fl (mc m' * x) + md m')) in *.
  assert (HN : 0 <= N) by (unfold N; apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]; assumption).
  pose proof (pow_1mu_pos (k + 2)) as P1. pose proof (pow_1pu_pos (k + 2)) as P2.
  destruct WN as [N1 N2]. destruct WD as [D1 D2].
  assert (HD' : 0 < D') by (eapply Rlt_le_trans; [|exact D1]; apply Rmult_lt_0_compat; assumption).
  assert (Q1 : (1 - u) ^ (k + 2) / (1 + u) ^ (k + 2) * (N / D) <= N' / D').
  { replace ((1 - u) ^ (k + 2) / (1 + u) ^ (k + 2) * (N / D))
      with (((1 - u) ^ (k + 2) * N) / ((1 + u) ^ (k + 2) * D)) by (field; lra).
    apply div_le_compat; try assumption. apply Rmult_le_pos; lra. }
  assert (Q2 : N' / D' <= (1 + u) ^ (k + 2) / (1 - u) ^ (k + 2) * (N / D)).
  { replace ((1 + u) ^ (k + 2) / (1 - u) ^ (k + 2) * (N / D))
      with (((1 + u) ^ (k + 2) * N) / ((1 - u) ^ (k + 2) * D)) by (field; lra).
    apply div_le_compat; try assumption.
    - eapply Rle_trans; [|exact N1]. apply Rmult_le_pos; lra.
    - apply Rmult_lt_0_compat; assumption. }
  assert (HQ : 0 <= N' / D').
  { eapply Rle_trans; [|exact Q1]. apply Rmult_le_pos.
    - unfold Rdiv; apply Rmult_le_pos; [lra|apply Rlt_le, Rinv_0_lt_compat; lra].
    - unfold Rdiv; apply Rmult_le_pos; [lra|apply Rlt_le, Rinv_0_lt_compat; lra]. }
  unfold fl_apply, apply. fold N D N' D'.
  destruct O5 as [d [Hd' ->]]. apply Rabs_le_inv in Hd'.
  replace (k + 3)%nat with (S (k + 2)) by lia. simpl pow.
  split.
  - replace ((1 - u) * (1 - u) ^ (k + 2) / (1 + u) ^ (k + 2) * (N / D))
      with (((1 - u) ^ (k + 2) / (1 + u) ^ (k + 2) * (N / D)) * (1 - u)) by (field; lra).
    apply Rmult_le_compat; try lra.
    apply Rmult_le_pos; [unfold Rdiv; apply Rmult_le_pos; [lra|apply Rlt_le, Rinv_0_lt_compat; lra]|].
    unfold Rdiv; apply Rmult_le_pos; [lra|apply Rlt_le, Rinv_0_lt_compat; lra].
  - replace ((1 + u) * (1 + u) ^ (k + 2) / (1 - u) ^ (k + 2) * (N / D))
      with (((1 + u) ^ (k + 2) / (1 - u) ^ (k + 2) * (N / D)) * (1 + u)) by (field; lra).
    apply Rmult_le_compat; lra.
Qed.

End Abstract.

(** ** Part 2: rounding to nearest in FLX (precision p, no underflow, no overflow) *)
Section FLX.

Variable prec : Z.
Hypothesis Hprec : (0 < prec)%Z.
Variable choice : Z -> bool.

(** The unit roundoff u = 2^{−p} (= ½ · 2^{1−p}). *)
Definition u_flx : R := u_ro radix2 prec.

(** Round to nearest, any tie-breaking rule (ties to even is [choice := fun n => negb (Z.even n)]). *)
Definition rn (x : R) : R := round radix2 (FLX_exp prec) (Znearest choice) x.

Lemma u_flx_nonneg : 0 <= u_flx.
Proof. unfold u_flx, u_ro. apply Rmult_le_pos; [lra|apply bpow_ge_0]. Qed.

Lemma u_flx_lt_1 : u_flx < 1.
Proof. apply u_ro_lt_1; exact Hprec. Qed.

Lemma rn_ok : forall x, fl_ok u_flx rn x.
Proof.
  intros x. destruct (relative_error_N_FLX_ex radix2 prec Hprec choice x) as [d [Hd Hr]].
  exists d. split; [exact Hd|exact Hr].
Qed.

Lemma rn_compose_ok : forall l e, compose_ok u_flx rn l e.
Proof. intros; repeat split; apply rn_ok. Qed.

Lemma rn_tree_ok : forall t, tree_ok u_flx rn t.
Proof. induction t; simpl; auto using rn_compose_ok. Qed.

Lemma rn_apply_ok : forall m x, apply_ok u_flx rn m x.
Proof. intros; repeat split; apply rn_ok. Qed.

(** One compose of two non-negative matrices: every entry is within [(1−u)², (1+u)²]·exact. *)
Theorem flx_compose_bound : forall l e, nonneg l -> nonneg e ->
  mwithin u_flx 2 (compose l e) (fl_compose rn l e).
Proof.
  intros l e Hl He. apply fl_compose_one; auto using u_flx_nonneg, u_flx_lt_1, rn_compose_ok.
Qed.

Theorem flx_compose_relative : forall l e i j, (i < 2)%nat -> (j < 2)%nat ->
  nonneg l -> nonneg e ->
  Rabs (entry (fl_compose rn l e) i j - entry (compose l e) i j)
  <= ((1 + u_flx) ^ 2 - 1) * entry (compose l e) i j.
Proof.
  intros. apply fl_compose_one_relative; auto using u_flx_nonneg, u_flx_lt_1, rn_compose_ok.
Qed.

(** A product of n non-negative leaves, in any evaluation order (any binary tree: every
    scan schedule's every output): within [(1−u)^K, (1+u)^K] entrywise, K = Σ(leaf roundings)
    + 2(n − 1); for exactly representable leaves K = 2(n − 1). *)
Theorem flx_product_bound : forall t, leaves_ok u_flx t ->
  mwithin u_flx (kleaves t + 2 * (nleaves t - 1)) (texact t) (tfl rn t).
Proof.
  intros t Hl. apply tree_within; auto using u_flx_nonneg, u_flx_lt_1, rn_tree_ok.
Qed.

Theorem flx_product_relative : forall t i j, (i < 2)%nat -> (j < 2)%nat -> leaves_ok u_flx t ->
  Rabs (entry (tfl rn t) i j - entry (texact t) i j)
  <= ((1 + u_flx) ^ (kleaves t + 2 * (nleaves t - 1)) - 1) * entry (texact t) i j.
Proof.
  intros. apply tree_relative; auto using u_flx_nonneg, u_flx_lt_1, rn_tree_ok.
Qed.

(** Exact leaves (k = 0 each): relative error ≤ (1 + u)^{2(n−1)} − 1 ≤ γ_{2(n−1)}. *)
Fixpoint exact_leaves (t : ptree) : Prop :=
  match t with
  | PLeaf m m' k => m' = m /\ k = 0%nat /\ nonneg m
  | PNode l e => exact_leaves l /\ exact_leaves e
  end.

Lemma exact_leaves_ok : forall t, exact_leaves t -> leaves_ok u_flx t /\ kleaves t = 0%nat.
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl.
  - intros [-> [-> Hm]]. split; [split; [exact Hm|apply mwithin_refl; auto using u_flx_nonneg, u_flx_lt_1]|reflexivity].
  - intros [Hl He]. destruct (IHl Hl), (IHe He). split; [split; assumption|lia].
Qed.

Theorem flx_product_exact_leaves : forall t i j, (i < 2)%nat -> (j < 2)%nat -> exact_leaves t ->
  Rabs (entry (tfl rn t) i j - entry (texact t) i j)
  <= ((1 + u_flx) ^ (2 * (nleaves t - 1)) - 1) * entry (texact t) i j.
Proof.
  intros t i j Hi Hj Hex. destruct (exact_leaves_ok t Hex) as [Hl Hk].
  pose proof (flx_product_relative t i j Hi Hj Hl) as H. rewrite Hk in H. exact H.
Qed.

Theorem flx_product_gamma : forall t i j, (i < 2)%nat -> (j < 2)%nat -> exact_leaves t ->
  INR (2 * (nleaves t - 1)) * u_flx < 1 ->
  Rabs (entry (tfl rn t) i j - entry (texact t) i j)
  <= INR (2 * (nleaves t - 1)) * u_flx / (1 - INR (2 * (nleaves t - 1)) * u_flx)
     * entry (texact t) i j.
Proof.
  intros t i j Hi Hj Hex Hg.
  eapply Rle_trans; [apply flx_product_exact_leaves; assumption|].
  apply Rmult_le_compat_r.
  - destruct (exact_leaves_ok t Hex) as [Hl _]. pose proof (texact_nonneg _ t Hl) as (?&?&?&?).
    destruct i as [|[|i]]; [| |lia]; destruct j as [|[|j]]; try lia; assumption.
  - apply pow_le_gamma; auto using u_flx_nonneg, u_flx_lt_1.
Qed.

(** One application to x ≥ 0 of a computed map whose entries carry k roundings. *)
Theorem flx_apply_bound : forall k m m' x,
  nonneg m -> 0 <= x -> 0 < den m x -> mwithin u_flx k m m' ->
  (1 - u_flx) ^ (k + 3) / (1 + u_flx) ^ (k + 2) * apply m x <= fl_apply rn m' x <=
  (1 + u_flx) ^ (k + 3) / (1 - u_flx) ^ (k + 2) * apply m x.
Proof.
  intros. apply fl_apply_bound; auto using u_flx_nonneg, u_flx_lt_1, rn_apply_ok.
Qed.

(** *** Power-of-two rescaling (§8 fact 3, [rescale_mode::power_of_two])

    In FLX, scaling by 2^e commutes with rounding, so a computation that rescales by powers of
    two after any composes (as computed: every entry multiplied by 2^f in floating point,
    [mobius_scale]) is exactly 2^E times the same computation without rescaling: the rounding
    bounds above hold for it unchanged, up to that exact factor. *)

Lemma rn_mult_bpow : forall x e, rn (x * bpow radix2 e) = rn x * bpow radix2 e.
Proof.
  intros x e. destruct (Req_dec x 0) as [->|Hx].
  - rewrite Rmult_0_l. unfold rn. rewrite round_0 by apply valid_rnd_N. ring.
  - unfold rn, round, F2R, scaled_mantissa, cexp. simpl.
    rewrite mag_mult_bpow by exact Hx. unfold FLX_exp.
    replace (mag radix2 x + e - prec)%Z with ((mag radix2 x - prec) + e)%Z by ring.
    rewrite Z.opp_add_distr, !bpow_plus, !bpow_opp.
    replace (x * bpow radix2 e * (/ bpow radix2 (mag radix2 x - prec) * / bpow radix2 e))
      with (x * / bpow radix2 (mag radix2 x - prec)).
    + ring.
    + field. split; apply Rgt_not_eq, bpow_gt_0.
Qed.

Lemma rn_rn : forall x, rn (rn x) = rn x.
Proof.
  intros x. assert (Hp : Prec_gt_0 prec) by exact Hprec.
  unfold rn. apply round_generic; [apply valid_rnd_N|].
  apply generic_format_round; [apply FLX_exp_valid; exact Hp|apply valid_rnd_N].
Qed.

(** The rescale as computed: every entry times s, rounded. *)
Definition fl_scale (s : R) (m : mob) : mob :=
  Mobius (rn (ma m * s)) (rn (mb m * s)) (rn (mc m * s)) (rn (md m * s)).

Lemma fl_dot_bpow : forall e1 e2 x1 y1 x2 y2,
  fl_dot rn (x1 * bpow radix2 e1) (y1 * bpow radix2 e2) (x2 * bpow radix2 e1) (y2 * bpow radix2 e2)
  = fl_dot rn x1 y1 x2 y2 * bpow radix2 (e1 + e2).
Proof.
  intros. unfold fl_dot.
  replace (x1 * bpow radix2 e1 * (y1 * bpow radix2 e2)) with (x1 * y1 * bpow radix2 (e1 + e2))
    by (rewrite bpow_plus; ring).
  replace (x2 * bpow radix2 e1 * (y2 * bpow radix2 e2)) with (x2 * y2 * bpow radix2 (e1 + e2))
    by (rewrite bpow_plus; ring).
  rewrite !rn_mult_bpow, <- Rmult_plus_distr_r, rn_mult_bpow. reflexivity.
Qed.

Lemma fl_compose_scale_bpow : forall e1 e2 l e,
  fl_compose rn (scale (bpow radix2 e1) l) (scale (bpow radix2 e2) e)
  = scale (bpow radix2 (e1 + e2)) (fl_compose rn l e).
Proof.
  intros e1 e2 [la lb lc ld] [ea eb ec ed].
  apply mobius_ext; simpl; apply fl_dot_bpow.
Qed.

Lemma fl_scale_bpow_compose : forall f E l e,
  fl_scale (bpow radix2 f) (scale (bpow radix2 E) (fl_compose rn l e))
  = scale (bpow radix2 (E + f)) (fl_compose rn l e).
Proof.
  intros f E [la lb lc ld] [ea eb ec ed].
  apply mobius_ext; simpl; unfold fl_dot;
    rewrite Rmult_assoc, <- bpow_plus, rn_mult_bpow, rn_rn; reflexivity.
Qed.

(** [tfl_pow2 f]: the computed product, rescaled after every compose by 2^{f(p)}, where [f]
    may look at the computed p (as [power_of_two] does: minus the exponent of its largest
    entry). *)
Fixpoint tfl_pow2 (f : mob -> Z) (t : ptree) : mob :=
  match t with
  | PLeaf _ m _ => m
  | PNode l e => let p := fl_compose rn (tfl_pow2 f l) (tfl_pow2 f e) in fl_scale (bpow radix2 (f p)) p
  end.

Theorem pow2_rescaled_tree : forall f t, exists E, tfl_pow2 f t = scale (bpow radix2 E) (tfl rn t).
Proof.
  intros f t; induction t as [m m' k|l [El IHl] e [Ee IHe]].
  - exists 0%Z. simpl. symmetry. apply scale_one.
  - simpl. rewrite IHl, IHe, fl_compose_scale_bpow, fl_scale_bpow_compose.
    eexists; reflexivity.
Qed.

(** The rounding bound for the power-of-two rescaled computation: it is 2^E times a matrix
    within [(1−u)^K, (1+u)^K]·exact, K = Σ(leaf roundings) + 2(n − 1). *)
Theorem flx_pow2_product_bound : forall f t, leaves_ok u_flx t ->
  exists E M, tfl_pow2 f t = scale (bpow radix2 E) M /\
              mwithin u_flx (kleaves t + 2 * (nleaves t - 1)) (texact t) M.
Proof.
  intros f t Hl. destruct (pow2_rescaled_tree f t) as [E HE].
  exists E, (tfl rn t). split; [exact HE|apply flx_product_bound; exact Hl].
Qed.

End FLX.

(** ** Part 3: IEEE-754 binary32, round to nearest even *)

Definition b32 := binary_float 24 128.

#[export] Instance b32_prec_gt_0 : Prec_gt_0 24 := eq_refl.
#[export] Instance b32_prec_lt_emax : Prec_lt_emax 24 128 := eq_refl.

(** The binary32 rounding (FLT, emin = −149: subnormals included) and its unit roundoff
    u = 2⁻²⁴. *)
Definition rne32 (x : R) : R := round radix2 (FLT_exp (-149) 24) ZnearestE x.
Definition u32 : R := u_ro radix2 24.

Lemma u32_value : u32 = / 16777216.
Proof. unfold u32, u_ro. simpl bpow. unfold Z.pow_pos; simpl. field. Qed.

Lemma u32_nonneg : 0 <= u32.
Proof. apply u_flx_nonneg. Qed.
Lemma u32_lt_1 : u32 < 1.
Proof. apply u_flx_lt_1. reflexivity. Qed.

(** One binary32 operation with exact result x commits one relative error ≤ u when x is zero
    or normal (no underflow: |x| ≥ 2⁻¹²⁶) and the rounded result does not overflow
    (|RN(x)| < 2¹²⁸, i.e. it is at most the largest finite binary32). *)
Definition b32_ok (x : R) : Prop :=
  (x = 0 \/ bpow radix2 (-126) <= Rabs x) /\ Rabs (rne32 x) < bpow radix2 128.

Lemma b32_fl_ok : forall x, b32_ok x -> fl_ok u32 rne32 x.
Proof.
  intros x [[->|Hn] _].
  - exists 0. split; [rewrite Rabs_R0; apply u32_nonneg|].
    unfold rne32. rewrite round_0 by apply valid_rnd_N. ring.
  - destruct (relative_error_N_FLT_ex radix2 (-149) 24 eq_refl (fun n => negb (Z.even n)) x Hn)
      as [d [Hd Hr]].
    exists d. split; [exact Hd|exact Hr].
Qed.

(** [Bmult], [Bplus], [Bdiv] (BinarySingleNaN, mode_NE) are [rne32] of the exact result. *)
Lemma b32_mult : forall x y : b32, is_finite x = true -> is_finite y = true ->
  Rabs (rne32 (B2R x * B2R y)) < bpow radix2 128 ->
  B2R (Bmult mode_NE x y) = rne32 (B2R x * B2R y) /\ is_finite (Bmult mode_NE x y) = true.
Proof.
  intros x y Fx Fy Ho. pose proof (Bmult_correct 24 128 _ _ mode_NE x y) as H.
  rewrite Rlt_bool_true in H by exact Ho. destruct H as [H1 [H2 _]].
  split; [exact H1|]. rewrite H2, Fx, Fy. reflexivity.
Qed.

Lemma b32_plus : forall x y : b32, is_finite x = true -> is_finite y = true ->
  Rabs (rne32 (B2R x + B2R y)) < bpow radix2 128 ->
  B2R (Bplus mode_NE x y) = rne32 (B2R x + B2R y) /\ is_finite (Bplus mode_NE x y) = true.
Proof.
  intros x y Fx Fy Ho. pose proof (Bplus_correct 24 128 _ _ mode_NE x y Fx Fy) as H.
  rewrite Rlt_bool_true in H by exact Ho. destruct H as [H1 [H2 _]].
  split; assumption.
Qed.

Lemma b32_div : forall x y : b32, is_finite x = true -> B2R y <> 0 ->
  Rabs (rne32 (B2R x / B2R y)) < bpow radix2 128 ->
  B2R (Bdiv mode_NE x y) = rne32 (B2R x / B2R y) /\ is_finite (Bdiv mode_NE x y) = true.
Proof.
  intros x y Fx Hy Ho. pose proof (Bdiv_correct 24 128 _ _ mode_NE x y Hy) as H.
  rewrite Rlt_bool_true in H by exact Ho. destruct H as [H1 [H2 _]].
  split; [exact H1|]. rewrite H2; exact Fx.
Qed.

(** *** Binary32 Möbius maps *)

Definition m32 := mobius b32.

Definition m2r (m : m32) : mob := Mobius (B2R (ma m)) (B2R (mb m)) (B2R (mc m)) (B2R (md m)).

Definition mfinite (m : m32) : Prop :=
  is_finite (ma m) = true /\ is_finite (mb m) = true /\
  is_finite (mc m) = true /\ is_finite (md m) = true.

Definition b32_dot (x1 y1 x2 y2 : b32) : b32 :=
  Bplus mode_NE (Bmult mode_NE x1 y1) (Bmult mode_NE x2 y2).

(** [mobius_compose] in binary32: four entries, each two products and a sum. *)
Definition b32_compose (l e : m32) : m32 :=
  Mobius (b32_dot (ma l) (ma e) (mb l) (mc e)) (b32_dot (ma l) (mb e) (mb l) (md e))
         (b32_dot (mc l) (ma e) (md l) (mc e)) (b32_dot (mc l) (mb e) (md l) (md e)).

Definition dot32_ok (x1 y1 x2 y2 : R) : Prop :=
  b32_ok (x1 * y1) /\ b32_ok (x2 * y2) /\ b32_ok (rne32 (x1 * y1) + rne32 (x2 * y2)).

(** No underflow and no overflow in any of the 12 operations of a compose. *)
Definition compose32_ok (l e : mob) : Prop :=
  dot32_ok (ma l) (ma e) (mb l) (mc e) /\ dot32_ok (ma l) (mb e) (mb l) (md e) /\
  dot32_ok (mc l) (ma e) (md l) (mc e) /\ dot32_ok (mc l) (mb e) (md l) (md e).

Lemma b32_dot_correct : forall x1 y1 x2 y2 : b32,
  is_finite x1 = true -> is_finite y1 = true -> is_finite x2 = true -> is_finite y2 = true ->
  dot32_ok (B2R x1) (B2R y1) (B2R x2) (B2R y2) ->
  B2R (b32_dot x1 y1 x2 y2) = fl_dot rne32 (B2R x1) (B2R y1) (B2R x2) (B2R y2) /\
  is_finite (b32_dot x1 y1 x2 y2) = true.
Proof.
  intros x1 y1 x2 y2 F1 F2 F3 F4 [[_ O1] [[_ O2] [_ O3]]].
  destruct (b32_mult x1 y1 F1 F2 O1) as [E1 G1].
  destruct (b32_mult x2 y2 F3 F4 O2) as [E2 G2].
  unfold b32_dot, fl_dot. rewrite <- E1, <- E2 in *.
  apply b32_plus; assumption.
Qed.

Lemma dot32_fl_ok : forall x1 y1 x2 y2, dot32_ok x1 y1 x2 y2 -> dot_ok u32 rne32 x1 y1 x2 y2.
Proof. intros x1 y1 x2 y2 (?&?&?); repeat split; apply b32_fl_ok; assumption. Qed.

Lemma compose32_fl_ok : forall l e, compose32_ok l e -> compose_ok u32 rne32 l e.
Proof. intros l e (?&?&?&?); split; [|split; [|split]]; apply dot32_fl_ok; assumption. Qed.

(** The binary32 compose computes [fl_compose rne32] of the values, and stays finite. *)
Theorem b32_compose_correct : forall l e, mfinite l -> mfinite e -> compose32_ok (m2r l) (m2r e) ->
  m2r (b32_compose l e) = fl_compose rne32 (m2r l) (m2r e) /\ mfinite (b32_compose l e).
Proof.
  intros l e (Fa&Fb&Fc&Fd) (Ga&Gb&Gc&Gd) (O1&O2&O3&O4).
  destruct (b32_dot_correct _ _ _ _ Fa Ga Fb Gc O1) as [E1 H1].
  destruct (b32_dot_correct _ _ _ _ Fa Gb Fb Gd O2) as [E2 H2].
  destruct (b32_dot_correct _ _ _ _ Fc Ga Fd Gc O3) as [E3 H3].
  destruct (b32_dot_correct _ _ _ _ Fc Gb Fd Gd O4) as [E4 H4].
  split.
  - unfold m2r, fl_compose, b32_compose; simpl. rewrite E1, E2, E3, E4. reflexivity.
  - repeat split; assumption.
Qed.

(** One binary32 compose of two non-negative finite matrices, without underflow or overflow:
    each entry within [(1−u)², (1+u)²]·exact, u = 2⁻²⁴. *)
Theorem b32_compose_bound : forall l e, mfinite l -> mfinite e ->
  nonneg (m2r l) -> nonneg (m2r e) -> compose32_ok (m2r l) (m2r e) ->
  mwithin u32 2 (compose (m2r l) (m2r e)) (m2r (b32_compose l e)).
Proof.
  intros l e Fl Fe Nl Ne Ok.
  destruct (b32_compose_correct l e Fl Fe Ok) as [-> _].
  apply fl_compose_one; auto using u32_nonneg, u32_lt_1, compose32_fl_ok.
Qed.

Theorem b32_compose_relative : forall l e i j, (i < 2)%nat -> (j < 2)%nat ->
  mfinite l -> mfinite e -> nonneg (m2r l) -> nonneg (m2r e) -> compose32_ok (m2r l) (m2r e) ->
  Rabs (B2R (gentry b32 (b32_compose l e) i j) - entry (compose (m2r l) (m2r e)) i j)
  <= ((1 + u32) ^ 2 - 1) * entry (compose (m2r l) (m2r e)) i j.
Proof.
  intros l e i j Hi Hj Fl Fe Nl Ne Ok.
  replace (B2R (gentry b32 (b32_compose l e) i j)) with (entry (m2r (b32_compose l e)) i j)
    by (destruct i as [|[|]]; destruct j as [|[|]]; reflexivity).
  destruct (b32_compose_correct l e Fl Fe Ok) as [-> _].
  apply fl_compose_one_relative; auto using u32_nonneg, u32_lt_1, compose32_fl_ok.
Qed.

(** *** A product of n binary32 leaves in any evaluation order *)

Inductive btree :=
  | BLeaf (exact : mob) (computed : m32) (k : nat)
  | BNode (later earlier : btree).

Fixpoint b32_eval (t : btree) : m32 :=
  match t with
  | BLeaf _ m _ => m
  | BNode l e => b32_compose (b32_eval l) (b32_eval e)
  end.

Fixpoint to_ptree (t : btree) : ptree :=
  match t with
  | BLeaf m m' k => PLeaf m (m2r m') k
  | BNode l e => PNode (to_ptree l) (to_ptree e)
  end.

Fixpoint bleaves_finite (t : btree) : Prop :=
  match t with
  | BLeaf _ m _ => mfinite m
  | BNode l e => bleaves_finite l /\ bleaves_finite e
  end.

(** No underflow or overflow anywhere: every compose of the tree, on the values computed. *)
Fixpoint btree_ok (t : btree) : Prop :=
  match t with
  | BLeaf _ _ _ => True
  | BNode l e => btree_ok l /\ btree_ok e /\
                 compose32_ok (tfl rne32 (to_ptree l)) (tfl rne32 (to_ptree e))
  end.

Lemma b32_eval_correct : forall t, bleaves_finite t -> btree_ok t ->
  m2r (b32_eval t) = tfl rne32 (to_ptree t) /\ mfinite (b32_eval t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros Hf Ho; [split; [reflexivity|exact Hf]|].
  destruct Hf as [Fl Fe]. destruct Ho as [Ol [Oe Oc]].
  destruct (IHl Fl Ol) as [El Gl]. destruct (IHe Fe Oe) as [Ee Ge].
  rewrite <- El, <- Ee in *. apply b32_compose_correct; assumption.
Qed.

Lemma btree_fl_ok : forall t, btree_ok t -> tree_ok u32 rne32 (to_ptree t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; [auto|].
  intros [Ol [Oe Oc]]. split; [auto|split; [auto|]]. apply compose32_fl_ok; exact Oc.
Qed.

(** The binary32 product of n finite non-negative leaves (each within k_leaf roundings of
    its exact leaf), without underflow or overflow in any operation, in any evaluation
    order: every entry within [(1−u)^K, (1+u)^K]·exact, K = Σ k_leaf + 2(n − 1), and so
    |error| ≤ ((1 + u)^K − 1)·exact. *)
Theorem b32_product_bound : forall t, bleaves_finite t -> btree_ok t ->
  leaves_ok u32 (to_ptree t) ->
  mwithin u32 (kleaves (to_ptree t) + 2 * (nleaves (to_ptree t) - 1))
          (texact (to_ptree t)) (m2r (b32_eval t)).
Proof.
  intros t Hf Ho Hl. destruct (b32_eval_correct t Hf Ho) as [-> _].
  apply tree_within; auto using u32_nonneg, u32_lt_1, btree_fl_ok.
Qed.

Theorem b32_product_relative : forall t i j, (i < 2)%nat -> (j < 2)%nat ->
  bleaves_finite t -> btree_ok t -> leaves_ok u32 (to_ptree t) ->
  Rabs (entry (m2r (b32_eval t)) i j - entry (texact (to_ptree t)) i j)
  <= ((1 + u32) ^ (kleaves (to_ptree t) + 2 * (nleaves (to_ptree t) - 1)) - 1)
     * entry (texact (to_ptree t)) i j.
Proof.
  intros t i j Hi Hj Hf Ho Hl. destruct (b32_eval_correct t Hf Ho) as [-> _].
  apply tree_relative; auto using u32_nonneg, u32_lt_1, btree_fl_ok.
Qed.

(** *** One binary32 application x ↦ (a x + b) / (c x + d) *)

Definition b32_apply (m : m32) (x : b32) : b32 :=
  Bdiv mode_NE (Bplus mode_NE (Bmult mode_NE (ma m) x) (mb m))
               (Bplus mode_NE (Bmult mode_NE (mc m) x) (md m)).

Definition apply32_ok (m : mob) (x : R) : Prop :=
  b32_ok (ma m * x) /\ b32_ok (rne32 (ma m * x) + mb m) /\
  b32_ok (mc m * x) /\ b32_ok (rne32 (mc m * x) + md m) /\
  b32_ok (rne32 (rne32 (ma m * x) + mb m) / rne32 (rne32 (mc m * x) + md m)).

(** A computed map (entries within k roundings of m) applied in binary32 to a finite x ≥ 0,
    without underflow or overflow: within [(1−u)^{k+3}/(1+u)^{k+2}, (1+u)^{k+3}/(1−u)^{k+2}]
    of the exact (a x + b)/(c x + d). *)
Theorem b32_apply_bound : forall k m (m' : m32) (x : b32),
  mfinite m' -> is_finite x = true -> nonneg m -> 0 <= B2R x -> 0 < den m (B2R x) ->
  mwithin u32 k m (m2r m') -> apply32_ok (m2r m') (B2R x) ->
  (1 - u32) ^ (k + 3) / (1 + u32) ^ (k + 2) * apply m (B2R x) <= B2R (b32_apply m' x) <=
  (1 + u32) ^ (k + 3) / (1 - u32) ^ (k + 2) * apply m (B2R x).
Proof.
  intros k m m' x (Fa&Fb&Fc&Fd) Fx Hm Hx Hden Hw Ok.
  pose proof u32_nonneg as U0. pose proof u32_lt_1 as U1.
  assert (Hfl : apply_ok u32 rne32 (m2r m') (B2R x)).
  { destruct Ok as (O1&O2&O3&O4&O5). repeat split; apply b32_fl_ok; assumption. }
  pose proof (fl_apply_bound u32 U0 U1 rne32 k m (m2r m') (B2R x) Hm Hx Hden Hw Hfl) as Hb.
  destruct Ok as ([_ O1]&[_ O2]&[_ O3]&[_ O4]&[_ O5]). simpl in O1, O2, O3, O4, O5.
  destruct (b32_mult _ _ Fa Fx O1) as [E1 G1].
  rewrite <- E1 in O2. destruct (b32_plus _ _ G1 Fb O2) as [E2 G2].
  destruct (b32_mult _ _ Fc Fx O3) as [E3 G3].
  rewrite <- E3 in O4. destruct (b32_plus _ _ G3 Fd O4) as [E4 G4].
  assert (HD : 0 < B2R (Bplus mode_NE (Bmult mode_NE (mc m') x) (md m'))).
  { rewrite E4, E3.
    destruct Hw as (_&_&Wc&Wd). destruct Hm as (_&_&Hc&Hd).
    destruct Hfl as (_&_&P3&P4&_). simpl in P3, P4.
    pose proof (fl_lin_within u32 U0 U1 rne32 k (mc m) (md m) (B2R (mc m')) (B2R (md m')) (B2R x)
                  Hc Hd Hx Wc Wd P3 P4) as [W _].
    eapply Rlt_le_trans; [|exact W]. apply Rmult_lt_0_compat; [apply pow_lt; lra|exact Hden]. }
  rewrite E1 in E2. rewrite E3 in E4. rewrite <- E2, <- E4 in O5.
  destruct (b32_div _ _ G2 (Rgt_not_eq _ _ HD) O5) as [E5 _].
  unfold b32_apply. rewrite E5, E2, E4. exact Hb.
Qed.
