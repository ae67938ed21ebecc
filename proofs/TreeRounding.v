(** * The contraction bound of a Möbius product computed in floating point, any evaluation tree
    (docs/math.md §8 fact 4; docs/error-model.md, "KLA: contraction bounds"; check/kla_bound.hpp,
    check/contraction_bound.hpp)

    Birkhoff.v bounds any evaluation tree over ℝ with abstract errors: the computed root is within
    B(T) of the exact composition in Hilbert's metric, B(leaf) = e, B(node l r) = B(l) + τ(l) B(r)
    + δ ([tree_error]). FloatError.v computes the products: a tree of composes, each entry
    fl(fl(x₁y₁) + fl(x₂y₂)) ([fl_compose]), with leaves carrying k roundings per entry. This file
    joins them: for non-negative leaves with positive diagonal (KLA's and the KDNs' leaves), in
    FloatError.v's rounding model (relative errors only: no underflow), the computed product's
    action is within B(T) of the exact product's at every x > 0, with

        e(leaf) = 2kη (its entries within e^{±kη}: Birkhoff.act_log_err),
        δ(node) = 4η  (a compose's entries within 2 roundings: FloatError.fl_compose_one),
        τ(leaf) = Birkhoff's τ of the exact leaf, τ(subtree) the product of its leaves',

    η = −ln(1 − u): the tree recursion the C++ evaluates for the scan forms with power-of-two
    rescaling (an exact common factor: Birkhoff.act_rescale; trace or max-entry rescaling add one
    rounding an entry, δ = 6η: TreeRescale.v). *)

From Coq Require Import Reals Lra Lia.
From KalmanOracle Require Import Mobius FloatError Birkhoff.
Open Scope R_scope.

(** What every tree theorem below concludes from Birkhoff.v's [tree_error]: an evaluation tree whose
    computed root acts as c and whose exact composition acts as e (x > 0) puts c x within B(T) of e x. *)
Lemma tree_contraction_of : forall T (c e : R -> R), Birkhoff.tree_ok T -> Birkhoff.computed T = c ->
  (forall x, 0 < x -> Birkhoff.exact T x = e x) ->
  forall x, 0 < x -> 0 < c x /\ Rabs (ln (c x) - ln (e x)) <= tree_bound T.
Proof.
  intros T c e Hok Hc He x Hx.
  destruct (tree_error T Hok x Hx) as [Hpos [_ Hb]].
  rewrite Hc in Hpos, Hb. rewrite He in Hb by exact Hx.
  split; assumption.
Qed.

Section Trees.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.

(** A map whose action Birkhoff.v bounds: non-negative entries, a > 0 and d > 0. *)
Definition strict (m : mob) : Prop := nonneg m /\ 0 < ma m /\ 0 < md m.

Lemma strict_compose : forall l e, strict l -> strict e -> strict (compose l e).
Proof.
  intros l e [Hl [Hla Hld]] [He [Hea Hed]].
  split; [apply nonneg_compose; assumption|].
  rewrite compose_entries. simpl.
  destruct Hl as (?&?&?&?). destruct He as (?&?&?&?). split; nra.
Qed.

Lemma strict_posmap : forall m, strict m -> posmap m.
Proof. intros m [H [Ha Hd]]. split; [exact H | split; [left; exact Ha | right; exact Hd]]. Qed.

(** Entries within k roundings of a strict map keep it strict. *)
Lemma within_strict : forall k m m', strict m -> mwithin u k m m' -> strict m'.
Proof.
  intros k m m' [(N1&N2&N3&N4) [Ha Hd]] (W1&W2&W3&W4).
  assert (Hu1 : u < 1) by apply u_bounds.
  pose proof (within_nonneg u Hu1 k _ _ N1 W1). pose proof (within_nonneg u Hu1 k _ _ N2 W2).
  pose proof (within_nonneg u Hu1 k _ _ N3 W3). pose proof (within_nonneg u Hu1 k _ _ N4 W4).
  destruct W1 as [W1 _]. destruct W4 as [W4 _].
  assert (0 < (1 - u) ^ k) by (apply pow_lt; lra).
  split; [repeat split; assumption | split; nra].
Qed.

(** The leaves strict, each computed leaf within its k roundings. *)
Fixpoint leaves_strict (t : ptree) : Prop :=
  match t with
  | PLeaf m m' k => strict m /\ mwithin u k m m'
  | PNode l e => leaves_strict l /\ leaves_strict e
  end.

Lemma leaves_strict_ok : forall t, leaves_strict t -> leaves_ok u t.
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros H.
  - destruct H as [[Hn _] Hw]. split; assumption.
  - destruct H. split; auto.
Qed.

Lemma texact_strict : forall t, leaves_strict t -> strict (texact t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros H.
  - apply H.
  - destruct H. apply strict_compose; auto.
Qed.

Lemma tfl_strict : forall t, leaves_strict t -> FloatError.tree_ok u fl t -> strict (tfl fl t).
Proof.
  intros t Hl Ht.
  apply (within_strict (kleaves t + 2 * (nleaves t - 1)) (texact t)); [apply texact_strict; exact Hl|].
  apply tree_within; [apply u_bounds | apply u_bounds | apply leaves_strict_ok; exact Hl | exact Ht].
Qed.

(** Entries within k roundings: the action within 2kη (within_exp, act_log_err). *)
Lemma mwithin_log_err : forall k m m', strict m -> mwithin u k m m' ->
  log_err (apply m') (apply m) (2 * (INR k * eta u)).
Proof.
  intros k m m' [(N1&N2&N3&N4) [Ha Hd]] (W1&W2&W3&W4).
  apply (act_log_err (ma m) (mb m) (mc m) (md m) (ma m') (mb m') (mc m') (md m')); try assumption.
  - apply Rmult_le_pos; [apply pos_INR | apply eta_nonneg; exact u_bounds].
  - apply within_exp; assumption.
  - apply within_exp; assumption.
  - apply within_exp; assumption.
  - apply within_exp; assumption.
Qed.

(** The Birkhoff evaluation tree of a compose tree: leaves (computed action, exact action, 2kη,
    τ of the exact leaf); nodes (the computed compose's action, 4η). *)
Fixpoint to_etree (t : ptree) : etree :=
  match t with
  | PLeaf m m' k => ELeaf (apply m') (apply m) (2 * (INR k * eta u)) (birkhoff_tau (ma m) (mb m) (mc m) (md m))
  | PNode l e => ENode (to_etree l) (to_etree e) (apply (fl_compose fl (tfl fl l) (tfl fl e))) (2 * (INR 2 * eta u))
  end.

Lemma to_etree_computed : forall t, Birkhoff.computed (to_etree t) = apply (tfl fl t).
Proof. destruct t; reflexivity. Qed.

Lemma to_etree_exact : forall t, leaves_strict t -> forall x, 0 < x ->
  Birkhoff.exact (to_etree t) x = apply (texact t) x.
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros H x Hx; [reflexivity|].
  destruct H as [Hl He].
  rewrite (IHe He x Hx).
  rewrite IHl by (first [exact Hl | apply apply_pos; [apply strict_posmap, texact_strict; exact He | exact Hx]]).
  symmetry. apply apply_compose; [apply strict_posmap, texact_strict; assumption
                                 | apply strict_posmap, texact_strict; assumption | exact Hx].
Qed.

Lemma to_etree_ok : forall t, leaves_strict t -> FloatError.tree_ok u fl t -> Birkhoff.tree_ok (to_etree t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros Hl Ht.
  - destruct Hl as [Hs Hw]. split; [apply mwithin_log_err; assumption|].
    destruct Hs as [(N1&N2&N3&N4) [Ha Hd]]. apply act_log_lipschitz; assumption.
  - destruct Hl as [Hll Hle]. destruct Ht as [Htl [Hte Hc]].
    split; [apply IHl; assumption|]. split; [apply IHe; assumption|].
    intros x Hx. rewrite !to_etree_computed.
    pose proof (tfl_strict l Hll Htl) as Sl. pose proof (tfl_strict e Hle Hte) as Se.
    (* the computed children's composition is the action of their exact matrix product *)
    rewrite <- apply_compose by (try apply strict_posmap; assumption).
    pose proof (strict_compose _ _ Sl Se) as Sc.
    assert (Hw : mwithin u 2 (compose (tfl fl l) (tfl fl e)) (fl_compose fl (tfl fl l) (tfl fl e))).
    { apply fl_compose_one; try apply u_bounds; [apply Sl | apply Se | exact Hc]. }
    destruct (mwithin_log_err 2 _ _ Sc Hw x Hx) as [Hpos [_ Hln]]. split; assumption.
Qed.

(** Any evaluation tree of composes (every scan schedule's output): the computed product acts
    within B(T) of the exact product, B(leaf) = 2kη, B(node l r) = B(l) + τ(l) B(r) + 4η. *)
Theorem fl_tree_contraction : forall t, leaves_strict t -> FloatError.tree_ok u fl t ->
  forall x, 0 < x ->
    0 < apply (tfl fl t) x /\
    Rabs (ln (apply (tfl fl t) x) - ln (apply (texact t) x)) <= tree_bound (to_etree t).
Proof.
  intros t Hl Ht. apply tree_contraction_of; [apply to_etree_ok; assumption | apply to_etree_computed |].
  intros x Hx. apply to_etree_exact; assumption.
Qed.

End Trees.

(** In Flocq's FLX rounding to nearest the model holds at every compose, so the bound holds for
    every tree of strict leaves. *)
Corollary flx_tree_contraction : forall (prec : Z) (choice : Z -> bool), (0 < prec)%Z ->
  forall t, leaves_strict (u_flx prec) t -> forall x, 0 < x ->
    Rabs (ln (apply (tfl (rn prec choice) t) x) - ln (apply (texact t) x))
    <= tree_bound (to_etree (u_flx prec) (rn prec choice) t).
Proof.
  intros prec choice Hprec t Hl x Hx.
  apply fl_tree_contraction; try assumption.
  - split; [apply u_flx_nonneg | apply u_flx_lt_1; exact Hprec].
  - apply (rn_tree_ok prec Hprec).
Qed.
