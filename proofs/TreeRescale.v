(** * Trace and max-entry rescaling in a floating-point Möbius tree: 6η a node
    (docs/math.md §8 facts 3 and 4; docs/error-model.md, "KLA: contraction bounds";
    check/contraction_bound.hpp, [mobius_recursion_rounding::node])

    TreeRounding.v bounds any evaluation tree of composes whose nodes are rescaled by exact
    factors (powers of two): δ = 4η a node, a compose's two roundings an entry. A kernel that
    rescales by its node's trace or largest entry multiplies every entry of the computed compose
    by a computed factor s (the reciprocal of the trace or of the largest entry, as rounded), and
    that product is rounded once more. Whatever s is, it is common to the four entries, so it
    moves no action ([Birkhoff.act_rescale]); what it costs is the one rounding of each product:
    the entries are within 3 roundings of s times the exact compose of the computed children, so
    the node acts within 2 · 3η = 6η of that composition, the δ the C++ charges for every
    rescaling mode. This file proves the tree bound with that δ for any positive factor chosen
    from the computed compose at every node, in FloatError.v's rounding model (relative errors
    only: no underflow, which the fixtures' range hypothesis keeps away). *)

From Coq Require Import Reals Lra Lia.
From KalmanOracle Require Import Mobius FloatError Birkhoff TreeRounding.
Open Scope R_scope.

Section Rescaled.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
(** The factor a node's compose is multiplied by, chosen from the computed compose: any number,
    positive where the tree is [rescaled_ok] (1 / fl(trace), 1 / max entry, a power of two). *)
Variable factor : mob -> R.

(** Every entry of m times s, rounded (the entries' order of Mobius.scale). *)
Definition fl_scale (s : R) (m : mob) : mob :=
  Mobius (fl (ma m * s)) (fl (mb m * s)) (fl (mc m * s)) (fl (md m * s)).

(** The computed product, each compose rescaled by its factor. *)
Fixpoint tfl_rescaled (t : ptree) : mob :=
  match t with
  | PLeaf _ m _ => m
  | PNode l e =>
      let p := fl_compose fl (tfl_rescaled l) (tfl_rescaled e) in fl_scale (factor p) p
  end.

Definition scale_ok (s : R) (m : mob) : Prop :=
  fl_ok u fl (ma m * s) /\ fl_ok u fl (mb m * s) /\ fl_ok u fl (mc m * s) /\ fl_ok u fl (md m * s).

(** Every operation of every node commits at most one relative error u; every factor positive. *)
Fixpoint rescaled_ok (t : ptree) : Prop :=
  match t with
  | PLeaf _ _ _ => True
  | PNode l e =>
      rescaled_ok l /\ rescaled_ok e /\
      compose_ok u fl (tfl_rescaled l) (tfl_rescaled e) /\
      0 < factor (fl_compose fl (tfl_rescaled l) (tfl_rescaled e)) /\
      scale_ok (factor (fl_compose fl (tfl_rescaled l) (tfl_rescaled e)))
               (fl_compose fl (tfl_rescaled l) (tfl_rescaled e))
  end.

Lemma within_scale : forall k s x y, 0 < s -> within u k x y -> within u k (x * s) (y * s).
Proof. intros k s x y Hs [H1 H2]. split; nra. Qed.

(** A compose of k-rounding entries, multiplied by s > 0 and rounded: one rounding more, around
    s times the exact matrix. *)
Lemma fl_scale_within : forall k s m m', 0 < s -> nonneg m -> mwithin u k m m' -> scale_ok s m' ->
  mwithin u (S k) (scale s m) (fl_scale s m').
Proof.
  intros k s m m' Hs (N1&N2&N3&N4) (W1&W2&W3&W4) (O1&O2&O3&O4).
  unfold mwithin, fl_scale, scale, gscale; simpl.
  assert (Hu1 : u < 1) by apply u_bounds.
  repeat split; (apply within_round; [exact Hu1 | apply Rmult_le_pos; lra | apply within_scale | ]);
    assumption.
Qed.

Lemma strict_scale : forall s m, 0 < s -> strict m -> strict (scale s m).
Proof.
  intros s m Hs [(N1&N2&N3&N4) [Ha Hd]].
  unfold strict, scale, gscale, nonneg; simpl. repeat split; nra.
Qed.

(** The computed node: within 3 roundings of s times the children's exact compose. *)
Lemma rescaled_node_within : forall l' e', strict l' -> strict e' ->
  compose_ok u fl l' e' -> 0 < factor (fl_compose fl l' e') ->
  scale_ok (factor (fl_compose fl l' e')) (fl_compose fl l' e') ->
  mwithin u 3 (scale (factor (fl_compose fl l' e')) (compose l' e'))
              (fl_scale (factor (fl_compose fl l' e')) (fl_compose fl l' e')).
Proof.
  intros l' e' Sl Se Hc Hs Ho.
  apply fl_scale_within; try assumption.
  - apply strict_compose; assumption.
  - apply fl_compose_one; [apply u_bounds | apply u_bounds | apply Sl | apply Se | exact Hc].
Qed.

Lemma tfl_rescaled_strict : forall t, leaves_strict u t -> rescaled_ok t -> strict (tfl_rescaled t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros Hl Ht.
  - destruct Hl as [Hs Hw]. apply (within_strict u u_bounds k m m'); assumption.
  - destruct Hl as [Hll Hle]. destruct Ht as [Htl [Hte [Hc [Hs Ho]]]].
    pose proof (IHl Hll Htl) as Sl. pose proof (IHe Hle Hte) as Se.
    apply (within_strict u u_bounds 3 (scale (factor (fl_compose fl (tfl_rescaled l) (tfl_rescaled e)))
                                            (compose (tfl_rescaled l) (tfl_rescaled e)))).
    + apply strict_scale; [exact Hs | apply strict_compose; assumption].
    + apply rescaled_node_within; assumption.
Qed.

(** The Birkhoff evaluation tree of a rescaled compose tree: leaves as in TreeRounding.v, nodes
    (the rescaled node's action, 6η). *)
Fixpoint to_etree_rescaled (t : ptree) : etree :=
  match t with
  | PLeaf m m' k => ELeaf (apply m') (apply m) (2 * (INR k * eta u)) (birkhoff_tau (ma m) (mb m) (mc m) (md m))
  | PNode l e => ENode (to_etree_rescaled l) (to_etree_rescaled e) (apply (tfl_rescaled (PNode l e)))
                       (2 * (INR 3 * eta u))
  end.

Lemma to_etree_rescaled_computed : forall t, Birkhoff.computed (to_etree_rescaled t) = apply (tfl_rescaled t).
Proof. destruct t; reflexivity. Qed.

Lemma to_etree_rescaled_exact : forall t, leaves_strict u t -> forall x, 0 < x ->
  Birkhoff.exact (to_etree_rescaled t) x = apply (texact t) x.
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros H x Hx; [reflexivity|].
  destruct H as [Hl He].
  rewrite (IHe He x Hx).
  assert (Pe : posmap (texact e)) by (apply strict_posmap; apply (texact_strict u); exact He).
  assert (Pl : posmap (texact l)) by (apply strict_posmap; apply (texact_strict u); exact Hl).
  rewrite IHl by (first [exact Hl | apply apply_pos; [exact Pe | exact Hx]]).
  symmetry. apply apply_compose; assumption.
Qed.

Lemma to_etree_rescaled_ok : forall t, leaves_strict u t -> rescaled_ok t -> Birkhoff.tree_ok (to_etree_rescaled t).
Proof.
  induction t as [m m' k|l IHl e IHe]; simpl; intros Hl Ht.
  - destruct Hl as [Hs Hw]. split; [apply (mwithin_log_err u u_bounds); assumption|].
    destruct Hs as [(N1&N2&N3&N4) [Ha Hd]]. apply act_log_lipschitz; assumption.
  - destruct Hl as [Hll Hle]. pose proof Ht as Ht'. destruct Ht' as [Htl [Hte [Hc [Hs Ho]]]].
    split; [apply IHl; assumption|]. split; [apply IHe; assumption|].
    intros x Hx. rewrite !to_etree_rescaled_computed.
    pose proof (tfl_rescaled_strict l Hll Htl) as Sl. pose proof (tfl_rescaled_strict e Hle Hte) as Se.
    (* the computed children's composition is the action of their exact matrix product, which a
       positive factor does not change *)
    rewrite <- apply_compose by (try apply strict_posmap; assumption).
    pose proof (strict_compose _ _ Sl Se) as Sc.
    pose proof (strict_scale _ _ Hs Sc) as Ssc.
    destruct (mwithin_log_err u u_bounds 3 _ _ Ssc (rescaled_node_within _ _ Sl Se Hc Hs Ho) x Hx)
      as [Hpos [_ Hln]].
    rewrite apply_scale in Hln.
    + cbv zeta. split; [exact Hpos | exact Hln].
    + lra.
    + destruct Sc as [(N1&N2&N3&N4) [Ha Hd]]. unfold den. nra.
Qed.

(** Any evaluation tree of composes, each rescaled by any positive factor it chooses, its
    products rounded: the computed product acts within B(T) of the exact product, B(leaf) = 2kη,
    B(node l r) = B(l) + τ(l) B(r) + 6η. *)
Theorem fl_rescaled_tree_contraction : forall t, leaves_strict u t -> rescaled_ok t ->
  forall x, 0 < x ->
    0 < apply (tfl_rescaled t) x /\
    Rabs (ln (apply (tfl_rescaled t) x) - ln (apply (texact t) x)) <= tree_bound (to_etree_rescaled t).
Proof.
  intros t Hl Ht.
  apply tree_contraction_of; [apply to_etree_rescaled_ok; assumption | apply to_etree_rescaled_computed |].
  intros x Hx. apply to_etree_rescaled_exact; assumption.
Qed.

End Rescaled.
