(** * Sums of non-negative terms in floating point, any summation order (the readout variances of
    KlaReadout.v and KdnReadout.v)

    S terms tᵢ ≥ 0, each computed within e^{±kᵢ} (KlaStep.v's [rel]), added by any binary tree of
    rounded additions (every summation order a kernel may choose) of depth at most n:

        |ŝ − s| ≤ Σᵢ tᵢ (e^{kᵢ + nη} − 1)          ([sum_tree_error]),
        ŝ within e^{±(k + nη)} of s when every kᵢ ≤ k ([uniform_sum_rel]),

    η = −ln(1 − u), in FloatError.v's model; a tree of S leaves has depth at most S − 1
    ([depth_le_count]), and the reference's order, from +0 in index order, is the left comb (adding a
    rounded value to 0 is exact: [sum_from_zero_is_comb]). *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep.
Import ListNotations.
Open Scope R_scope.

Section PositiveSum.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.

(** A summation tree over terms: a leaf holds an exact term t ≥ 0, its computed value, and the
    log-distance k between them; a node is one rounded addition. *)
Inductive sum_tree : Type :=
  | Leaf (t computed k : R)
  | Node (l r : sum_tree).

Fixpoint exact_sum (T : sum_tree) : R :=
  match T with Leaf t _ _ => t | Node l r => exact_sum l + exact_sum r end.

Fixpoint computed_sum (T : sum_tree) : R :=
  match T with Leaf _ c _ => c | Node l r => fl (computed_sum l + computed_sum r) end.

Fixpoint depth (T : sum_tree) : nat :=
  match T with Leaf _ _ _ => 0 | Node l r => S (Nat.max (depth l) (depth r)) end.

Fixpoint leaf_count (T : sum_tree) : nat :=
  match T with Leaf _ _ _ => 1 | Node l r => leaf_count l + leaf_count r end.

Fixpoint leaves_ok (T : sum_tree) : Prop :=
  match T with
  | Leaf t c k => 0 <= t /\ 0 <= k /\ rel k t c
  | Node l r => leaves_ok l /\ leaves_ok r
  end.

(** Σ_leaves t e^{±(k + n η)}: the computed sum's range at depth at most n. *)
Fixpoint upper (n : nat) (T : sum_tree) : R :=
  match T with Leaf t _ k => t * exp (k + INR n * eta u) | Node l r => upper n l + upper n r end.

Fixpoint lower (n : nat) (T : sum_tree) : R :=
  match T with Leaf t _ k => t * exp (- (k + INR n * eta u)) | Node l r => lower n l + lower n r end.

(** The leaves of a tree, in order. *)
Fixpoint leaf_terms (T : sum_tree) : list (R * R * R) :=
  match T with Leaf t c k => [(t, c, k)] | Node l r => leaf_terms l ++ leaf_terms r end.

(** Σ_leaves t (e^{k + n η} − 1). *)
Fixpoint budget (n : nat) (T : sum_tree) : R :=
  match T with Leaf t _ k => t * (exp (k + INR n * eta u) - 1) | Node l r => budget n l + budget n r end.

Lemma depth_le_count : forall T, (depth T <= leaf_count T - 1)%nat.
Proof.
  induction T as [t c k | l IHl r IHr]; simpl; [lia|].
  assert (1 <= leaf_count l)%nat by (clear; induction l; simpl; lia).
  assert (1 <= leaf_count r)%nat by (clear; induction r; simpl; lia).
  lia.
Qed.

(** Every leaf's computed value, and every rounded partial sum, stays within the range. *)
Lemma computed_range : forall T n, leaves_ok T -> (depth T <= n)%nat ->
  lower n T <= computed_sum T <= upper n T.
Proof.
  pose proof (eta_nonneg u u_bounds) as He.
  induction T as [t c k | l IHl r IHr]; intros n Hok Hd; simpl in *.
  - destruct Hok as [Ht [Hk [th [[H1 H2] ->]]]].
    assert (Hn : 0 <= INR n * eta u) by (apply Rmult_le_pos; [apply pos_INR | exact He]).
    assert (exp (k + INR n * eta u) >= exp k).
    { destruct (Req_dec (INR n * eta u) 0) as [->|]; [rewrite Rplus_0_r; lra|].
      left. apply exp_increasing. lra. }
    assert (exp (- (k + INR n * eta u)) <= exp (- k)).
    { destruct (Req_dec (INR n * eta u) 0) as [->|]; [rewrite Rplus_0_r; lra|].
      left. apply exp_increasing. lra. }
    split; nra.
  - destruct Hok as [Hl Hr]. destruct n as [|n]; [lia|].
    assert (Hdl : (depth l <= n)%nat) by lia. assert (Hdr : (depth r <= n)%nat) by lia.
    specialize (IHl n Hl Hdl). specialize (IHr n Hr Hdr).
    (* fl(a + b) = (a + b) θ, θ ∈ [e^{−η}, e^{η}] *)
    destruct (round 0 (computed_sum l + computed_sum r) (computed_sum l + computed_sum r) (rel_refl _))
      as [th [[H1 H2] Hfl]].
    rewrite Rplus_0_l in H1, H2. rewrite Hfl.
    assert (Hs : forall m T', leaves_ok T' -> 0 <= lower m T').
    { intros m T'. induction T' as [t' c' k' | l' IHl' r' IHr']; simpl; intros Hok'.
      - destruct Hok' as [Ht' _]. pose proof (exp_pos (- (k' + INR m * eta u))). nra.
      - destruct Hok' as [Hl' Hr']. specialize (IHl' Hl'). specialize (IHr' Hr'). lra. }
    pose proof (Hs n l Hl). pose proof (Hs n r Hr).
    assert (Hstep : forall m T', upper (S m) T' = upper m T' * exp (eta u) /\
                                 lower (S m) T' = lower m T' * exp (- eta u)).
    { intros m T'. induction T' as [t' c' k' | l' [IHl1 IHl2] r' [IHr1 IHr2]]; cbn [upper lower].
      - rewrite S_INR. split.
        + rewrite Rmult_assoc, <- exp_plus. f_equal. f_equal. ring.
        + rewrite Rmult_assoc, <- exp_plus. f_equal. f_equal. ring.
      - rewrite IHl1, IHr1, IHl2, IHr2. split; ring. }
    destruct (Hstep n l) as [Hul Hll]. destruct (Hstep n r) as [Hur Hlr].
    rewrite Hul, Hur, Hll, Hlr.
    assert (0 < exp (eta u)) by apply exp_pos. assert (0 < exp (- eta u)) by apply exp_pos.
    split; nra.
Qed.

(** |computed − exact| ≤ budget, for a tree of depth at most n. *)
Theorem sum_tree_error : forall T n, leaves_ok T -> (depth T <= n)%nat ->
  Rabs (computed_sum T - exact_sum T) <= budget n T.
Proof.
  intros T n Hok Hd. destruct (computed_range T n Hok Hd) as [Hlo Hhi].
  assert (Hu : upper n T - exact_sum T = budget n T).
  { clear. induction T as [t c k | l IHl r IHr]; simpl; [ring | lra]. }
  (* exact − lower ≤ budget: 1 − e^{−x} ≤ e^{x} − 1 *)
  assert (Hl : exact_sum T - lower n T <= budget n T).
  { clear Hlo Hhi Hu Hd. induction T as [t c k | l IHl r IHr]; simpl in *.
    - destruct Hok as [Ht [Hk _]].
      assert (Hx : 0 <= k + INR n * eta u).
      { pose proof (eta_nonneg u u_bounds). assert (0 <= INR n) by apply pos_INR. nra. }
      set (x := k + INR n * eta u) in *.
      assert (exp x * exp (- x) = 1) by (rewrite <- exp_plus; replace (x + - x) with 0 by ring; apply exp_0).
      assert (exp x >= 1) by (destruct (Req_dec x 0) as [->|]; [rewrite exp_0; lra | left; rewrite <- exp_0; apply exp_increasing; lra]).
      assert (0 < exp (- x)) by apply exp_pos.
      (* 1 − e^{−x} ≤ e^{x} − 1  ⇔  2 ≤ e^{x} + e^{−x} *)
      assert (1 - exp (- x) <= exp x - 1) by nra.
      nra.
    - destruct Hok as [Hl' Hr']. specialize (IHl Hl'). specialize (IHr Hr'). lra. }
  apply Rabs_le. lra.
Qed.

(** rel k x y bounds the absolute error by (e^k − 1)|x|. *)
Lemma rel_abs_error : forall k x y, 0 <= k -> rel k x y -> Rabs (y - x) <= (exp k - 1) * Rabs x.
Proof.
  intros k x y Hk [th [[H1 H2] ->]].
  assert (exp k * exp (- k) = 1) by (rewrite <- exp_plus; replace (k + - k) with 0 by ring; apply exp_0).
  assert (exp k >= 1) by (destruct (Req_dec k 0) as [->|]; [rewrite exp_0; lra | left; rewrite <- exp_0; apply exp_increasing; lra]).
  assert (0 < exp (- k)) by apply exp_pos.
  assert (1 - exp (- k) <= exp k - 1) by nra.
  replace (x * th - x) with (x * (th - 1)) by ring. rewrite Rabs_mult.
  assert (Rabs (th - 1) <= exp k - 1) by (apply Rabs_le; lra).
  rewrite Rmult_comm. apply Rmult_le_compat_r; [apply Rabs_pos | lra].
Qed.

Fixpoint leaves_within (k : R) (T : sum_tree) : Prop :=
  match T with Leaf _ _ k' => k' <= k | Node l r => leaves_within k l /\ leaves_within k r end.

Lemma leaves_within_nonneg : forall T k, leaves_ok T -> leaves_within k T -> 0 <= k.
Proof.
  induction T as [t c k' | l IHl r IHr]; simpl; intros k Hok Hk.
  - destruct Hok as [_ [Hk' _]]. lra.
  - destruct Hok as [Hl _]. destruct Hk as [Hkl _]. exact (IHl k Hl Hkl).
Qed.

(** Every leaf within k: the computed sum within e^{±(k + nη)} of the exact one. *)
Theorem uniform_sum_rel : forall T n k, leaves_ok T -> (depth T <= n)%nat -> leaves_within k T ->
  rel (k + INR n * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros T n k Hok Hd Hk. destruct (computed_range T n Hok Hd) as [Hlo Hhi].
  set (m := k + INR n * eta u).
  assert (Hup : upper n T <= exp m * exact_sum T /\ exp (- m) * exact_sum T <= lower n T /\ 0 <= exact_sum T).
  { clear Hlo Hhi Hd. induction T as [t c k' | l IHl r IHr]; simpl in *.
    - destruct Hok as [Ht _].
      assert (exp (k' + INR n * eta u) <= exp m).
      { unfold m. destruct (Req_dec k' k) as [->|]; [lra | left; apply exp_increasing; lra]. }
      assert (exp (- m) <= exp (- (k' + INR n * eta u))).
      { unfold m. destruct (Req_dec k' k) as [->|]; [lra | left; apply exp_increasing; lra]. }
      split; [nra | split; [nra | exact Ht]].
    - destruct Hok as [Hl Hr]. destruct Hk as [Hkl Hkr].
      destruct (IHl Hl Hkl) as [A [B C]]. destruct (IHr Hr Hkr) as [D [E F]].
      split; [nra | split; [nra | lra]]. }
  destruct Hup as [Hu [Hl Hs]].
  destruct (Req_dec (exact_sum T) 0) as [Hz|Hz].
  - (* every term 0: the computed sum is 0 *)
    rewrite Hz in Hu, Hl. rewrite Rmult_0_r in Hu, Hl.
    assert (Hm : 0 <= m).
    { unfold m. assert (0 <= INR n) by apply pos_INR. pose proof (eta_nonneg u u_bounds).
      assert (0 <= k) by exact (leaves_within_nonneg T k Hok Hk). nra. }
    exists 1. rewrite Hz. split; [|lra].
    assert (exp (- m) <= 1) by (rewrite <- exp_0; destruct (Req_dec m 0) as [->|];
                                 [rewrite Ropp_0; lra | left; apply exp_increasing; lra]).
    assert (1 <= exp m) by (rewrite <- exp_0; destruct (Req_dec m 0) as [->|]; [lra | left; apply exp_increasing; lra]).
    lra.
  - exists (computed_sum T / exact_sum T). split.
    + assert (0 < exact_sum T) by lra. split.
      * apply Rmult_le_reg_r with (exact_sum T); [lra|]. field_simplify; lra.
      * apply Rmult_le_reg_r with (exact_sum T); [lra|]. field_simplify; lra.
    + field. exact Hz.
Qed.

(** The leaves' conditions from a property P that every leaf of [leaf_terms T] has: the form in
    which the readout and gain theorems state their terms. *)
Lemma leaves_ok_from_terms : forall (P : R -> R -> R -> Prop) T,
  (forall t c k, P t c k -> 0 <= t /\ 0 <= k /\ rel k t c) ->
  (forall t c k, In (t, c, k) (leaf_terms T) -> P t c k) -> leaves_ok T.
Proof.
  intros P T HP. induction T as [t c k | l IHl r IHr]; simpl; intros Hin.
  - exact (HP t c k (Hin t c k (or_introl eq_refl))).
  - split; [apply IHl | apply IHr]; intros t c k H; apply Hin, in_or_app; tauto.
Qed.

Lemma leaves_within_from_terms : forall (P : R -> R -> R -> Prop) k T,
  (forall t c k', P t c k' -> k' <= k) ->
  (forall t c k', In (t, c, k') (leaf_terms T) -> P t c k') -> leaves_within k T.
Proof.
  intros P k T HP. induction T as [t c k' | l IHl r IHr]; simpl; intros Hin.
  - exact (HP t c k' (Hin t c k' (or_introl eq_refl))).
  - split; [apply IHl | apply IHr]; intros t c k'' H; apply Hin, in_or_app; tauto.
Qed.

(** [uniform_sum_rel] for a tree of K leaves, each with P, P bounding every leaf by k. *)
Corollary uniform_sum_rel_terms : forall (P : R -> R -> R -> Prop) k T K,
  (forall t c k', P t c k' -> 0 <= t /\ 0 <= k' /\ k' <= k /\ rel k' t c) ->
  (forall t c k', In (t, c, k') (leaf_terms T) -> P t c k') -> leaf_count T = K ->
  rel (k + INR (K - 1) * eta u) (exact_sum T) (computed_sum T).
Proof.
  intros P k T K HP Hin HK. apply uniform_sum_rel.
  - apply (leaves_ok_from_terms P T); [|exact Hin]. intros t c k' H. destruct (HP t c k' H) as [? [? [? ?]]]. tauto.
  - rewrite <- HK. apply depth_le_count.
  - apply (leaves_within_from_terms P k T); [|exact Hin]. intros t c k' H. destruct (HP t c k' H) as [? [? [? ?]]]. exact H2.
Qed.

(** The reference's order: from +0, s = 0, 1, …: the left comb over the terms, the first addition
    0 + t̂₀ exact (t̂₀ is a rounded value: [fl_idem]). *)
Hypothesis fl_idem : forall x, fl (fl x) = fl x.

Fixpoint sum_from (s : R) (l : list R) : R :=
  match l with [] => s | x :: r => sum_from (fl (s + x)) r end.

Fixpoint comb (acc : sum_tree) (l : list sum_tree) : sum_tree :=
  match l with [] => acc | x :: r => comb (Node acc x) r end.

Lemma sum_from_comb : forall l acc,
  sum_from (computed_sum acc) (map computed_sum l) = computed_sum (comb acc l).
Proof. induction l as [|x r IH]; intros acc; simpl; [reflexivity|]. apply (IH (Node acc x)). Qed.

Lemma sum_from_zero_is_comb : forall (first : sum_tree) (rest : list sum_tree) p,
  computed_sum first = fl p ->
  sum_from 0 (map computed_sum (first :: rest)) = computed_sum (comb first rest).
Proof.
  intros first rest p Hfirst. simpl. rewrite Rplus_0_l, Hfirst, fl_idem, <- Hfirst.
  apply sum_from_comb.
Qed.

End PositiveSum.
