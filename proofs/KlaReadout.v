(** * KLA's readout variance in floating point: the bound the fixtures store for y_var
    (docs/error-model.md, "KLA"; check/kla_bound.hpp)

    y_var_t = Σ_s q_s² / λ_s,t. The reference and the GPU kernel compute each term as
    fl(fl(q q) / λ̂) from the computed precision λ̂ (within e^{±E_s} of the exact λ: KlaStep.v for
    the sequential recursion, KlaScan.v for the scans) and add the S terms, the reference from +0 in
    order s = 0, 1, …, a kernel in an order of its own. This file proves, in FloatError.v's model
    (every operation one relative error of at most u), the bound check/kla_bound.hpp evaluates:

        |ŷ_var − y_var| ≤ Σ_s (q_s² / λ_s) (e^{E_s + (S + 1)η} − 1),   η = −ln(1 − u),

    for the terms summed by any binary tree ([readout_variance_error]: every summation order,
    each term keeping its own E_s), and for the reference's order from +0
    ([readout_variance_error_from_zero]; adding a rounded value to 0 is exact, [fl_idem]). The
    count: a term two roundings (q² and the quotient) past its λ̂, a leaf of a tree of S leaves at
    most S − 1 additions deep. *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep.
Import ListNotations.
Open Scope R_scope.

Section Readout.

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

(** The bound: Σ_leaves t (e^{k + n η} − 1). *)
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

(** One readout-variance term: fl(fl(q q) / λ̂) from a λ̂ within E of λ > 0 is within E + 2η of
    q² / λ. *)
Lemma variance_term_rel : forall q lambda lambda_hat E, 0 < lambda -> rel E lambda lambda_hat ->
  rel (E + 2 * eta u) (q * q / lambda) (fl (fl (q * q) / lambda_hat)).
Proof.
  intros q lambda lambda_hat E Hl HE.
  eapply rel_mono; [|apply round, rel_div; [lra | apply round, rel_refl | exact HE]].
  lra.
Qed.

(** The readout variance of one token and channel, S ≥ 1 terms (q_s, λ_s, λ̂_s, E_s), summed by any
    tree: the bound of check/kla_bound.hpp, Σ_s (q_s²/λ_s) (e^{E_s + (S + 1)η} − 1). *)
Definition variance_leaf (q lambda lambda_hat E : R) : sum_tree :=
  Leaf (q * q / lambda) (fl (fl (q * q) / lambda_hat)) (E + 2 * eta u).

Fixpoint leaf_terms (T : sum_tree) : list (R * R * R) :=
  match T with Leaf t c k => [(t, c, k)] | Node l r => leaf_terms l ++ leaf_terms r end.

Theorem readout_variance_error : forall (T : sum_tree) (S : nat),
  leaf_count T = S ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists q lambda lambda_hat E, 0 < lambda /\ 0 <= E /\ rel E lambda lambda_hat /\
       t = q * q / lambda /\ c = fl (fl (q * q) / lambda_hat) /\ k = E + 2 * eta u) ->
  Rabs (computed_sum T - exact_sum T) <= budget (S - 1) T.
Proof.
  intros T S HS Hterms. apply sum_tree_error.
  - clear HS. induction T as [t c k | l IHl r IHr]; simpl in *.
    + destruct (Hterms t c k (or_introl eq_refl)) as [q [lambda [lambda_hat [E [Hl [HE [Hr [-> [-> ->]]]]]]]]].
      pose proof (eta_nonneg u u_bounds).
      assert (0 <= q * q) by nra. assert (0 < / lambda) by (apply Rinv_0_lt_compat; exact Hl).
      split; [unfold Rdiv; nra|].
      split; [lra | apply variance_term_rel; assumption].
    + split; [apply IHl | apply IHr]; intros t c k Hin; apply Hterms, in_or_app; tauto.
  - rewrite <- HS. apply depth_le_count.
Qed.

(** In the budget, a leaf of [variance_leaf q λ λ̂ E] at depth S − 1 contributes
    (q²/λ)(e^{E + (S + 1)η} − 1): the formula of check/kla_bound.hpp. *)
Lemma variance_leaf_budget : forall q lambda lambda_hat E S, (1 <= S)%nat ->
  budget (S - 1) (variance_leaf q lambda lambda_hat E) =
  q * q / lambda * (exp (E + (INR S + 1) * eta u) - 1).
Proof.
  intros q lambda lambda_hat E S HS. simpl. rewrite minus_INR by lia. simpl (INR 1).
  f_equal. f_equal. f_equal. ring.
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

(** The reference's y_var: the S = 1 + length rest terms added from +0 in order, the bound of
    check/kla_bound.hpp. *)
Corollary readout_variance_error_from_zero : forall (first : sum_tree) (rest : list sum_tree) p S,
  computed_sum first = fl p -> leaf_count (comb first rest) = S ->
  (forall t c k, In (t, c, k) (leaf_terms (comb first rest)) ->
     exists q lambda lambda_hat E, 0 < lambda /\ 0 <= E /\ rel E lambda lambda_hat /\
       t = q * q / lambda /\ c = fl (fl (q * q) / lambda_hat) /\ k = E + 2 * eta u) ->
  Rabs (sum_from 0 (map computed_sum (first :: rest)) - exact_sum (comb first rest))
    <= budget (S - 1) (comb first rest).
Proof.
  intros first rest p S Hfirst HS Hterms.
  rewrite (sum_from_zero_is_comb first rest p Hfirst).
  exact (readout_variance_error (comb first rest) S HS Hterms).
Qed.

End Readout.
