(** * Möbius maps: docs/math.md §8 facts 1 and 3; docs/math.md "Möbius maps".

    [Mobius a b c d] is the 2×2 matrix [[a, b], [c, d]], acting on x by
    x ↦ (a x + b) / (c x + d).  [compose later earlier] is the matrix product
    [later · earlier] ("later map on the left", as [mobius_compose] in
    reference/include/kalman_oracle/algebra/mobius.hpp).

    Part 1 works over any commutative ring (the algebraic laws need nothing more);
    part 2 specialises to the reals and adds the action, which needs division. *)

From Coq Require Import Reals Lra Lia.

Record mobius (K : Type) := Mobius { ma : K; mb : K; mc : K; md : K }.
Arguments Mobius {K} _ _ _ _.
Arguments ma {K} _.
Arguments mb {K} _.
Arguments mc {K} _.
Arguments md {K} _.

Lemma mobius_ext {K} (m n : mobius K) :
  ma m = ma n -> mb m = mb n -> mc m = mc n -> md m = md n -> m = n.
Proof. destruct m, n; simpl; intros; subst; reflexivity. Qed.

(** ** Part 1: over any commutative ring *)
Section CommRing.

Variable K : Type.
Variables (zero one : K) (add mul sub : K -> K -> K) (opp : K -> K).
Hypothesis Kth : ring_theory zero one add mul sub opp eq.
Add Ring Kring : Kth.

(** [gcompose l e] = l · e (later on the left). *)
Definition gcompose (l e : mobius K) : mobius K :=
  Mobius (add (mul (ma l) (ma e)) (mul (mb l) (mc e)))
         (add (mul (ma l) (mb e)) (mul (mb l) (md e)))
         (add (mul (mc l) (ma e)) (mul (md l) (mc e)))
         (add (mul (mc l) (mb e)) (mul (md l) (md e))).

Definition gidentity : mobius K := Mobius one zero zero one.

Definition gdet (m : mobius K) : K := sub (mul (ma m) (md m)) (mul (mb m) (mc m)).

(** [gscale s m] = s M, entry by entry (as [mobius_scale]). *)
Definition gscale (s : K) (m : mobius K) : mobius K :=
  Mobius (mul (ma m) s) (mul (mb m) s) (mul (mc m) s) (mul (md m) s).

(** The matrix view: entry (i, j), i, j ∈ {0, 1}. *)
Definition gentry (m : mobius K) (i j : nat) : K :=
  match i, j with
  | 0, 0 => ma m
  | 0, _ => mb m
  | _, 0 => mc m
  | _, _ => md m
  end.

Theorem gcompose_is_matrix_product : forall l e i j, (i < 2)%nat -> (j < 2)%nat ->
  gentry (gcompose l e) i j =
  add (mul (gentry l i 0) (gentry e 0 j)) (mul (gentry l i 1) (gentry e 1 j)).
Proof.
  intros l e i j Hi Hj.
  destruct i as [|[|i]]; [| |lia]; destruct j as [|[|j]]; try lia; reflexivity.
Qed.

Theorem gcompose_assoc : forall m2 m1 m0,
  gcompose m2 (gcompose m1 m0) = gcompose (gcompose m2 m1) m0.
Proof. intros [] [] []; apply mobius_ext; simpl; ring. Qed.

Theorem gcompose_identity_l : forall m, gcompose gidentity m = m.
Proof. intros []; apply mobius_ext; simpl; ring. Qed.

Theorem gcompose_identity_r : forall m, gcompose m gidentity = m.
Proof. intros []; apply mobius_ext; simpl; ring. Qed.

Theorem gdet_compose : forall l e, gdet (gcompose l e) = mul (gdet l) (gdet e).
Proof. intros [] []; unfold gdet; simpl; ring. Qed.

Theorem gdet_identity : gdet gidentity = one.
Proof. unfold gdet; simpl; ring. Qed.

Theorem gdet_scale : forall s m, gdet (gscale s m) = mul (mul s s) (gdet m).
Proof. intros s []; unfold gdet; simpl; ring. Qed.

(** Rescaling commutes with composition: (s L)(t E) = (s t)(L E). *)
Theorem gcompose_scale : forall s t l e,
  gcompose (gscale s l) (gscale t e) = gscale (mul s t) (gcompose l e).
Proof. intros s t [] []; apply mobius_ext; simpl; ring. Qed.

Theorem gscale_scale : forall s t m, gscale s (gscale t m) = gscale (mul t s) m.
Proof. intros s t []; apply mobius_ext; simpl; ring. Qed.

Theorem gscale_one : forall m, gscale one m = m.
Proof. intros []; apply mobius_ext; simpl; ring. Qed.

End CommRing.

(** ** Part 2: over the reals *)
Open Scope R_scope.

Notation mob := (mobius R).

Definition compose : mob -> mob -> mob := gcompose R Rplus Rmult.
Definition identity : mob := gidentity R 0 1.
Definition det : mob -> R := gdet R Rmult Rminus.
Definition scale : R -> mob -> mob := gscale R Rmult.
Definition entry : mob -> nat -> nat -> R := gentry R.

(** The action x ↦ (a x + b) / (c x + d) ([mobius_apply]). *)
Definition apply (m : mob) (x : R) : R := (ma m * x + mb m) / (mc m * x + md m).

Definition den (m : mob) (x : R) : R := mc m * x + md m.

Lemma compose_entries : forall l e,
  compose l e = Mobius (ma l * ma e + mb l * mc e) (ma l * mb e + mb l * md e)
                       (mc l * ma e + md l * mc e) (mc l * mb e + md l * md e).
Proof. reflexivity. Qed.

(** Fact 1: composition is the matrix product, associative, with the identity neutral. *)
Theorem compose_is_matrix_product : forall l e i j, (i < 2)%nat -> (j < 2)%nat ->
  entry (compose l e) i j = entry l i 0 * entry e 0 j + entry l i 1 * entry e 1 j.
Proof. intros; apply gcompose_is_matrix_product; assumption. Qed.

Theorem compose_assoc : forall m2 m1 m0,
  compose m2 (compose m1 m0) = compose (compose m2 m1) m0.
Proof. intros; apply (gcompose_assoc R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem compose_identity_l : forall m, compose identity m = m.
Proof. intros; apply (gcompose_identity_l R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem compose_identity_r : forall m, compose m identity = m.
Proof. intros; apply (gcompose_identity_r R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

(** Determinants multiply. *)
Theorem det_compose : forall l e, det (compose l e) = det l * det e.
Proof. intros; apply (gdet_compose R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem det_identity : det identity = 1.
Proof. apply (gdet_identity R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem det_scale : forall s m, det (scale s m) = s * s * det m.
Proof. intros; apply (gdet_scale R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem compose_scale : forall s t l e,
  compose (scale s l) (scale t e) = scale (s * t) (compose l e).
Proof. intros; apply (gcompose_scale R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem scale_scale : forall s t m, scale s (scale t m) = scale (t * s) m.
Proof. intros; apply (gscale_scale R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

Theorem scale_one : forall m, scale 1 m = m.
Proof. intros; apply (gscale_one R 0 1 Rplus Rmult Rminus Ropp RTheory). Qed.

(** *** The action *)

Theorem apply_identity : forall x, apply identity x = x.
Proof. intros x; unfold apply, identity, gidentity; simpl; field. Qed.

Lemma den_compose : forall l e x, den e x <> 0 ->
  den (compose l e) x = den l (apply e x) * den e x.
Proof.
  intros [la lb lc ld] [ea eb ec ed] x H; unfold den, apply in *; simpl in *.
  field; exact H.
Qed.

(** The action composes, wherever the two denominators are non-zero (any real x). *)
Theorem apply_compose_general : forall l e x,
  den e x <> 0 -> den l (apply e x) <> 0 ->
  apply (compose l e) x = apply l (apply e x).
Proof.
  intros l e x He Hl.
  assert (Hc : den (compose l e) x <> 0)
    by (rewrite den_compose by exact He; apply Rmult_integral_contrapositive; auto).
  destruct l as [la lb lc ld], e as [ea eb ec ed].
  unfold apply, den in *; simpl in *.
  assert (Hl' : lc * (ea * x + eb) + ld * (ec * x + ed) <> 0).
  { intro H0; apply Hl.
    replace (lc * ((ea * x + eb) / (ec * x + ed)) + ld)
      with ((lc * (ea * x + eb) + ld * (ec * x + ed)) / (ec * x + ed)) by (field; exact He).
    rewrite H0; unfold Rdiv; ring. }
  field; split; assumption.
Qed.

(** *** Maps of the positive reals to themselves.

    [posmap m]: every entry is ≥ 0, the numerator does not vanish on x > 0 (a > 0 or b > 0),
    nor does the denominator (c > 0 or d > 0).  Every leaf of docs/math.md §8 is one (a > 0 and
    d > 0 there; see Models.v). *)
Definition nonneg (m : mob) : Prop :=
  0 <= ma m /\ 0 <= mb m /\ 0 <= mc m /\ 0 <= md m.

Definition posmap (m : mob) : Prop :=
  nonneg m /\ (0 < ma m \/ 0 < mb m) /\ (0 < mc m \/ 0 < md m).

(** Non-negative leaves stay non-negative under composition. *)
Theorem nonneg_compose : forall l e, nonneg l -> nonneg e -> nonneg (compose l e).
Proof.
  intros [la lb lc ld] [ea eb ec ed] (?&?&?&?) (?&?&?&?); unfold nonneg; simpl.
  repeat split; apply Rplus_le_le_0_compat; apply Rmult_le_pos; assumption.
Qed.

Theorem nonneg_identity : nonneg identity.
Proof. unfold nonneg, identity, gidentity; simpl; lra. Qed.

Theorem posmap_identity : posmap identity.
Proof. unfold posmap, nonneg, identity, gidentity; simpl; lra. Qed.

Lemma pos_plus_l : forall a b, 0 < a -> 0 <= b -> 0 < a + b.
Proof. intros; lra. Qed.
Lemma pos_plus_r : forall a b, 0 <= a -> 0 < b -> 0 < a + b.
Proof. intros; lra. Qed.

Theorem posmap_compose : forall l e, posmap l -> posmap e -> posmap (compose l e).
Proof.
  intros l e [Hl [Hl1 Hl2]] [He [He1 He2]].
  split; [apply nonneg_compose; assumption|].
  destruct l as [la lb lc ld], e as [ea eb ec ed]; unfold nonneg in *; simpl in *.
  destruct Hl as (?&?&?&?), He as (?&?&?&?).
  split.
  - destruct Hl1, He1, He2;
      first [ left; apply pos_plus_l; [apply Rmult_lt_0_compat; assumption
                                      | apply Rmult_le_pos; assumption]; fail
            | left; apply pos_plus_r; [apply Rmult_le_pos; assumption
                                      | apply Rmult_lt_0_compat; assumption]; fail
            | right; apply pos_plus_l; [apply Rmult_lt_0_compat; assumption
                                       | apply Rmult_le_pos; assumption]; fail
            | right; apply pos_plus_r; [apply Rmult_le_pos; assumption
                                       | apply Rmult_lt_0_compat; assumption]; fail ].
  - destruct Hl2, He1, He2;
      first [ left; apply pos_plus_l; [apply Rmult_lt_0_compat; assumption
                                      | apply Rmult_le_pos; assumption]; fail
            | left; apply pos_plus_r; [apply Rmult_le_pos; assumption
                                      | apply Rmult_lt_0_compat; assumption]; fail
            | right; apply pos_plus_l; [apply Rmult_lt_0_compat; assumption
                                       | apply Rmult_le_pos; assumption]; fail
            | right; apply pos_plus_r; [apply Rmult_le_pos; assumption
                                       | apply Rmult_lt_0_compat; assumption]; fail ].
Qed.

Lemma lin_pos : forall p q x, 0 <= p -> 0 <= q -> (0 < p \/ 0 < q) -> 0 < x -> 0 < p * x + q.
Proof.
  intros p q x Hp Hq [H|H] Hx.
  - apply pos_plus_l; [apply Rmult_lt_0_compat|]; assumption.
  - apply pos_plus_r; [apply Rmult_le_pos; lra|assumption].
Qed.

Theorem den_pos : forall m x, posmap m -> 0 < x -> 0 < den m x.
Proof.
  intros m x [(?&?&?&?) [_ Hp]] Hx; unfold den; apply lin_pos; assumption.
Qed.

(** A positive map sends (0, ∞) into (0, ∞). *)
Theorem apply_pos : forall m x, posmap m -> 0 < x -> 0 < apply m x.
Proof.
  intros m x Hm Hx. pose proof (den_pos m x Hm Hx) as Hd.
  destruct Hm as [(?&?&?&?) [Hp _]]; unfold apply.
  apply Rdiv_lt_0_compat; [apply lin_pos|]; assumption.
Qed.

(** The action is a monoid action of (posmap, compose, identity) on the positive reals:
    [apply_identity] and this. *)
Theorem apply_compose : forall l e x, posmap l -> posmap e -> 0 < x ->
  apply (compose l e) x = apply l (apply e x).
Proof.
  intros l e x Hl He Hx.
  apply apply_compose_general.
  - apply Rgt_not_eq, den_pos; assumption.
  - apply Rgt_not_eq, den_pos; [assumption|apply apply_pos; assumption].
Qed.

(** Fact 3: a non-zero rescaling leaves the action unchanged (wherever it is defined). *)
Theorem apply_scale : forall s m x, s <> 0 -> den m x <> 0 -> apply (scale s m) x = apply m x.
Proof.
  intros s [a b c d] x Hs Hd; unfold apply, den in *; simpl in *.
  replace (c * s * x + d * s) with ((c * x + d) * s) by ring.
  field; split; assumption.
Qed.

Theorem posmap_scale : forall s m, 0 < s -> posmap m -> posmap (scale s m).
Proof.
  intros s [a b c d] Hs [(?&?&?&?) [Hn1 Hn2]]; unfold posmap, nonneg in *; simpl in *.
  repeat split; try (apply Rmult_le_pos; lra).
  - destruct Hn1; [left|right]; apply Rmult_lt_0_compat; assumption.
  - destruct Hn2; [left|right]; apply Rmult_lt_0_compat; assumption.
Qed.

(** *** The rescaling modes of [mobius_rescale]: each divides by a positive factor, and each
    is canonical (rescaling c M and M gives the same matrix for every c > 0). *)
Definition trace (m : mob) : R := ma m + md m.

Definition max_entry (m : mob) : R :=
  Rmax (Rmax (Rabs (ma m)) (Rabs (mb m))) (Rmax (Rabs (mc m)) (Rabs (md m))).

Inductive rescale_mode := rescale_none | rescale_trace | rescale_max_entry.

(** The factor [mobius_rescale] multiplies by ([power_of_two] is any power of two; it is
    covered by [apply_scale] and [rescaled_tree], which allow any positive factor). *)
Definition rescale_factor (mode : rescale_mode) (m : mob) : R :=
  match mode with
  | rescale_none => 1
  | rescale_trace => if Req_EM_T (trace m) 0 then 1 else / trace m
  | rescale_max_entry => if Req_EM_T (max_entry m) 0 then 1 else / max_entry m
  end.

Definition rescale (mode : rescale_mode) (m : mob) : mob := scale (rescale_factor mode m) m.

Lemma max_entry_nonneg : forall m, 0 <= max_entry m.
Proof.
  intros m; unfold max_entry.
  eapply Rle_trans; [|apply Rmax_l]. eapply Rle_trans; [|apply Rmax_l]. apply Rabs_pos.
Qed.

Theorem rescale_factor_pos : forall mode m, nonneg m -> 0 < rescale_factor mode m.
Proof.
  intros mode m (?&?&?&?); destruct mode; simpl; [lra| |].
  - destruct Req_EM_T as [|Hn]; [lra|]. apply Rinv_0_lt_compat. unfold trace in *. lra.
  - destruct Req_EM_T as [|Hn]; [lra|]. apply Rinv_0_lt_compat.
    pose proof (max_entry_nonneg m). lra.
Qed.

Lemma trace_scale : forall c m, trace (scale c m) = c * trace m.
Proof. intros c []; unfold trace; simpl; ring. Qed.

Lemma max_entry_scale : forall c m, 0 < c -> max_entry (scale c m) = c * max_entry m.
Proof.
  intros c [a b d e] Hc; unfold max_entry; simpl.
  rewrite !Rabs_mult, (Rabs_pos_eq c) by lra.
  rewrite <- !(Rmult_comm c).
  rewrite !RmaxRmult by lra. reflexivity.
Qed.

(** Canonical: [trace] and [max_entry] give the same matrix for M and c M (c > 0), so a
    schedule that rescales after every compose yields exactly the fold's matrices over exact
    arithmetic (property [mobius_rescale_canonical]).  [rescale_none] is not canonical. *)
Theorem rescale_trace_canonical : forall c m, 0 < c -> trace m <> 0 ->
  rescale rescale_trace (scale c m) = rescale rescale_trace m.
Proof.
  intros c m Hc Ht; unfold rescale, rescale_factor.
  rewrite trace_scale.
  destruct (Req_EM_T (c * trace m) 0) as [H|_].
  { exfalso; apply Rmult_integral in H; destruct H; lra. }
  destruct (Req_EM_T (trace m) 0) as [H|_]; [contradiction|].
  rewrite scale_scale. f_equal. field. split; lra.
Qed.

Theorem rescale_max_entry_canonical : forall c m, 0 < c -> max_entry m <> 0 ->
  rescale rescale_max_entry (scale c m) = rescale rescale_max_entry m.
Proof.
  intros c m Hc Ht; unfold rescale, rescale_factor.
  rewrite max_entry_scale by exact Hc.
  destruct (Req_EM_T (c * max_entry m) 0) as [H|_].
  { exfalso; apply Rmult_integral in H; destruct H; lra. }
  destruct (Req_EM_T (max_entry m) 0) as [H|_]; [contradiction|].
  rewrite scale_scale. f_equal. field. split; lra.
Qed.

(** A rescaled map acts as the map itself. *)
Theorem apply_rescale : forall mode m x, nonneg m -> den m x <> 0 ->
  apply (rescale mode m) x = apply m x.
Proof.
  intros mode m x Hm Hd; unfold rescale.
  apply apply_scale; [apply Rgt_not_eq, rescale_factor_pos|]; assumption.
Qed.

(** *** Any evaluation order with any positive rescaling after any compose.

    A binary tree of composes over leaves, later subtree on the left.  [eval_rescaled f]
    multiplies every compose's result by [f] of it; whatever positive [f] is (the three
    modes above, a power of two, or a different choice at every node), the result is a
    positive multiple of the exact product and so has the same action.  Every scan schedule
    computes each of its outputs as such a tree over the leaves of that prefix. *)
Inductive tree := Leaf (m : mob) | Node (later earlier : tree).

Fixpoint eval (t : tree) : mob :=
  match t with
  | Leaf m => m
  | Node l e => compose (eval l) (eval e)
  end.

Fixpoint eval_rescaled (f : mob -> R) (t : tree) : mob :=
  match t with
  | Leaf m => m
  | Node l e => let p := compose (eval_rescaled f l) (eval_rescaled f e) in scale (f p) p
  end.

Theorem rescaled_tree : forall (f : mob -> R), (forall m, 0 < f m) ->
  forall t, exists c, 0 < c /\ eval_rescaled f t = scale c (eval t).
Proof.
  intros f Hf t; induction t as [m|l [cl [Hcl IHl]] e [ce [Hce IHe]]].
  - exists 1; split; [lra|]; simpl; symmetry; apply scale_one.
  - simpl. rewrite IHl, IHe, compose_scale, scale_scale.
    eexists; split; [|reflexivity].
    apply Rmult_lt_0_compat; [apply Rmult_lt_0_compat; assumption|apply Hf].
Qed.

(** The same for non-negative leaves when the factor is positive on non-negative matrices
    only, as [rescale_factor] of every mode is ([rescale_factor_pos]). *)
Fixpoint tree_nonneg (t : tree) : Prop :=
  match t with
  | Leaf m => nonneg m
  | Node l e => tree_nonneg l /\ tree_nonneg e
  end.

Lemma nonneg_scale : forall c m, 0 <= c -> nonneg m -> nonneg (scale c m).
Proof.
  intros c [a b d e] Hc (?&?&?&?); unfold nonneg; simpl.
  repeat split; apply Rmult_le_pos; assumption.
Qed.

Lemma eval_nonneg : forall t, tree_nonneg t -> nonneg (eval t).
Proof.
  induction t as [m|l IHl e IHe]; simpl; [auto|].
  intros [Hl He]. apply nonneg_compose; auto.
Qed.

Theorem rescaled_tree_nonneg : forall (f : mob -> R), (forall m, nonneg m -> 0 < f m) ->
  forall t, tree_nonneg t -> exists c, 0 < c /\ eval_rescaled f t = scale c (eval t).
Proof.
  intros f Hf t; induction t as [m|l IHl e IHe]; intros Ht.
  - exists 1; split; [lra|]; simpl; symmetry; apply scale_one.
  - destruct Ht as [Hl He].
    destruct (IHl Hl) as [cl [Hcl El]]. destruct (IHe He) as [ce [Hce Ee]].
    simpl. rewrite El, Ee, compose_scale, scale_scale.
    eexists; split; [|reflexivity].
    apply Rmult_lt_0_compat; [apply Rmult_lt_0_compat; assumption|].
    apply Hf, nonneg_scale; [apply Rlt_le, Rmult_lt_0_compat; assumption|].
    apply nonneg_compose; apply eval_nonneg; assumption.
Qed.

(** Every rescale mode of [mobius_rescale], after every compose of any evaluation tree of
    non-negative leaves, gives a positive multiple of the exact product: the same action. *)
Corollary rescaled_tree_modes : forall mode t, tree_nonneg t ->
  exists c, 0 < c /\ eval_rescaled (rescale_factor mode) t = scale c (eval t).
Proof.
  intros mode t Ht. apply rescaled_tree_nonneg; [|exact Ht].
  intros m Hm. apply rescale_factor_pos; exact Hm.
Qed.

Theorem rescaled_tree_apply : forall (f : mob -> R), (forall m, 0 < f m) ->
  forall t x, den (eval t) x <> 0 -> apply (eval_rescaled f t) x = apply (eval t) x.
Proof.
  intros f Hf t x Hd. destruct (rescaled_tree f Hf t) as [c [Hc ->]].
  apply apply_scale; [lra|assumption].
Qed.
