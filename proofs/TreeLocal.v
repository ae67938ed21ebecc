(** * The tree bound along the trajectory: leaf factors valid only near the exact points
    (docs/error-model.md, "KDN covariances: the trajectory-local bound"; check/contraction_bound.hpp,
    trajectory_lane_log_bound)

    Birkhoff.v's [tree_error] asks every leaf for an error and a Lipschitz coefficient valid at every
    x > 0. Along a scan only points near the exact trajectory are ever fed to a leaf, and there its
    factors can be much smaller (KdnLeafLocal.v). Here a tree over the segment that starts at the exact
    point x is [tree_ok_near] at radius r when its later child's factors hold within r + B(earlier) of
    the exact point the later child reads, its earlier child's within r of x, and each leaf's
    coefficient is at most 1 (non-negative Möbius maps never expand Hilbert's metric). Then at every y
    within r of x the computed tree is within the same bound B(T) = B(L) + τ(L) B(R) + δ of the exact
    composition ([tree_error_near]); from the exact prior, radius 0 ([tree_error_from_exact]).

    The radius a node needs is the sum of B over the earlier siblings on its path from the root, at
    most the root's [tree_peak] ([radius_le_peak] in the form the C++ evaluates it:
    peak(N) = max(peak(R), peak(L) + B(R), B(N)), the largest of r_M + B(M) over the nodes M). *)

From Coq Require Import Reals Lra.
From KalmanOracle Require Import Birkhoff.
Open Scope R_scope.

(** y within r of x in Hilbert's metric on (0, ∞). *)
Definition near (x r y : R) : Prop := 0 < y /\ Rabs (ln y - ln x) <= r.

Lemma near_centre : forall x r, 0 < x -> 0 <= r -> near x r x.
Proof. intros x r Hx Hr. split; [exact Hx |]. unfold Rminus. rewrite Rplus_opp_r, Rabs_R0. exact Hr. Qed.

Lemma near_mono : forall x r r' y, r <= r' -> near x r y -> near x r' y.
Proof. intros x r r' y Hr [Hy H]. split; [exact Hy | lra]. Qed.

(** A leaf's factors within r of x: its error, and its Lipschitz coefficient, at most 1. *)
Definition leaf_ok_near (fc f : R -> R) (e t x r : R) : Prop :=
  (forall y, near x r y -> 0 < fc y /\ 0 < f y /\ Rabs (ln (fc y) - ln (f y)) <= e) /\
  0 <= t <= 1 /\
  (forall y1 y2, near x r y1 -> near x r y2 -> Rabs (ln (f y1) - ln (f y2)) <= t * Rabs (ln y1 - ln y2)).

Fixpoint tree_ok_near (T : etree) (x r : R) : Prop :=
  match T with
  | ELeaf fc f e t => leaf_ok_near fc f e t x r
  | ENode l r' nc d =>
      tree_ok_near r' x r /\ tree_ok_near l (exact r' x) (r + tree_bound r') /\
      forall y, 0 < y -> 0 < nc y /\ Rabs (ln (nc y) - ln (computed l (computed r' y))) <= d
  end.

(** The computed tree within B(T) of the exact composition at every point within r of x; the exact
    composition τ(T)-Lipschitz there, τ(T) in [0, 1]; B(T) >= 0. *)
Theorem tree_error_near : forall T x r, 0 < x -> 0 <= r -> tree_ok_near T x r ->
  (forall y, near x r y ->
     0 < computed T y /\ 0 < exact T y /\ Rabs (ln (computed T y) - ln (exact T y)) <= tree_bound T) /\
  (forall y1 y2, near x r y1 -> near x r y2 ->
     Rabs (ln (exact T y1) - ln (exact T y2)) <= tree_tau T * Rabs (ln y1 - ln y2)) /\
  0 <= tree_tau T <= 1 /\ 0 <= tree_bound T.
Proof.
  induction T as [fc f e t | L IHL R IHR nc d]; intros x r Hx Hr Hok; simpl in *.
  - unfold leaf_ok_near in Hok. destruct Hok as [Herr [Ht Hlip]]. split; [exact Herr |]. split; [exact Hlip |]. split; [exact Ht |].
    destruct (Herr x (near_centre x r Hx Hr)) as [_ [_ H]]. pose proof (Rabs_pos (ln (fc x) - ln (f x))). lra.
  - destruct Hok as [OkR [OkL Hnode]].
    destruct (IHR x r Hx Hr OkR) as [ErrR [LipR [TauR BR]]].
    destruct (ErrR x (near_centre x r Hx Hr)) as [_ [Hxm _]].
    set (xm := exact R x) in *.
    assert (Hr' : 0 <= r + tree_bound R) by lra.
    destruct (IHL xm (r + tree_bound R) Hxm Hr' OkL) as [ErrL [LipL [TauL BL]]].
    (* the exact image of the ball stays within r of xm, the computed one within r + B(R) *)
    assert (ExactIn : forall y, near x r y -> near xm (r + tree_bound R) (exact R y)).
    { intros y Hy. destruct (ErrR y Hy) as [_ [HeR _]]. split; [exact HeR |].
      pose proof (LipR y x Hy (near_centre x r Hx Hr)) as Hl. destruct Hy as [_ Hy].
      assert (tree_tau R * Rabs (ln y - ln x) <= r).
      { apply Rle_trans with (1 * r); [apply Rmult_le_compat; try lra; apply Rabs_pos | lra]. }
      fold xm in Hl. lra. }
    assert (ComputedIn : forall y, near x r y -> near xm (r + tree_bound R) (computed R y)).
    { intros y Hy. destruct (ErrR y Hy) as [HcR [HeR He]]. split; [exact HcR |].
      destruct (ExactIn y Hy) as [_ Hin].
      pose proof (LipR y x Hy (near_centre x r Hx Hr)) as Hl.
      assert (Hyx : Rabs (ln y - ln x) <= r) by apply Hy.
      assert (tree_tau R * Rabs (ln y - ln x) <= r).
      { apply Rle_trans with (1 * r); [apply Rmult_le_compat; try lra; apply Rabs_pos | lra]. }
      replace (ln (computed R y) - ln xm) with ((ln (computed R y) - ln (exact R y)) + (ln (exact R y) - ln xm))
        by ring.
      eapply Rle_trans; [apply Rabs_triang |]. fold xm in Hl. lra. }
    split; [| split; [| split]].
    + intros y Hy.
      destruct (Hnode y (proj1 Hy)) as [Hnc Hd].
      destruct (ErrR y Hy) as [HcR [HeR HER]].
      destruct (ErrL (computed R y) (ComputedIn y Hy)) as [HcL [HeLc HEL]].
      destruct (ErrL (exact R y) (ExactIn y Hy)) as [_ [HeLe _]].
      pose proof (LipL (computed R y) (exact R y) (ComputedIn y Hy) (ExactIn y Hy)) as HlL.
      split; [exact Hnc | split; [exact HeLe |]].
      replace (ln (nc y) - ln (exact L (exact R y)))
        with ((ln (nc y) - ln (computed L (computed R y))) + (ln (computed L (computed R y)) - ln (exact L (computed R y)))
              + (ln (exact L (computed R y)) - ln (exact L (exact R y)))) by ring.
      assert (tree_tau L * Rabs (ln (computed R y) - ln (exact R y)) <= tree_tau L * tree_bound R)
        by (apply Rmult_le_compat_l; lra).
      eapply Rle_trans; [apply Rabs_triang |].
      pose proof (Rabs_triang (ln (nc y) - ln (computed L (computed R y)))
                              (ln (computed L (computed R y)) - ln (exact L (computed R y)))).
      lra.
    + intros y1 y2 H1 H2.
      pose proof (LipL (exact R y1) (exact R y2) (ExactIn y1 H1) (ExactIn y2 H2)) as HlL.
      pose proof (LipR y1 y2 H1 H2) as HlR.
      eapply Rle_trans; [exact HlL |]. rewrite Rmult_assoc. apply Rmult_le_compat_l; lra.
    + split; [apply Rmult_le_pos; lra |]. apply Rle_trans with (1 * 1); [apply Rmult_le_compat; lra | lra].
    + assert (0 <= tree_tau L * tree_bound R) by (apply Rmult_le_pos; lra).
      destruct (Hnode x Hx) as [_ Hd]. pose proof (Rabs_pos (ln (nc x) - ln (computed L (computed R x)))). lra.
Qed.

(** A scan's prefix applied to the exact prior: the root at radius 0. *)
Corollary tree_error_from_exact : forall T x, 0 < x -> tree_ok_near T x 0 ->
  0 < computed T x /\ Rabs (ln (computed T x) - ln (exact T x)) <= tree_bound T.
Proof.
  intros T x Hx Hok.
  destruct (tree_error_near T x 0 Hx (Rle_refl 0) Hok) as [Err _].
  destruct (Err x (near_centre x 0 Hx (Rle_refl 0))) as [Hc [_ H]]. split; assumption.
Qed.

(** Factors valid within a larger radius are valid within a smaller one: a tree whose every node
    holds its factors at radius ρ is [tree_ok_near] at any radius whose nested radii stay below ρ. *)
Fixpoint tree_peak (T : etree) : R :=
  match T with
  | ELeaf _ _ e _ => e
  | ENode l r _ d => Rmax (tree_peak r) (Rmax (tree_peak l + tree_bound r) (tree_bound l + tree_tau l * tree_bound r + d))
  end.

(** The factors of every node valid within ρ of the exact point it reads (leaves: error and
    coefficient at most 1; nodes: their rounding at every input). *)
Fixpoint tree_ok_within (T : etree) (x rho : R) : Prop :=
  match T with
  | ELeaf fc f e t => leaf_ok_near fc f e t x rho
  | ENode l r' nc d =>
      tree_ok_within r' x rho /\ tree_ok_within l (exact r' x) rho /\
      forall y, 0 < y -> 0 < nc y /\ Rabs (ln (nc y) - ln (computed l (computed r' y))) <= d
  end.

(** A node's radius plus its bound is at most the peak: r + peak(T) <= ρ makes every nested radius
    at most ρ, so factors valid within ρ give [tree_ok_near] at r. *)
Theorem radius_le_peak : forall T x r rho, 0 < x -> 0 <= r -> 0 <= rho -> r + tree_peak T <= rho ->
  tree_ok_within T x rho -> tree_ok_near T x r.
Proof.
  induction T as [fc f e t | L IHL R IHR nc d]; intros x r rho Hx Hr Hrho Hpeak Hok; simpl in *.
  - unfold leaf_ok_near in Hok |- *. destruct Hok as [Herr [Ht Hlip]].
    assert (He : 0 <= e).
    { destruct (Herr x (near_centre x rho Hx Hrho)) as [_ [_ H]].
      pose proof (Rabs_pos (ln (fc x) - ln (f x))). lra. }
    split; [| split; [exact Ht |]].
    + intros y Hy. apply Herr. apply (near_mono x r rho); [lra | exact Hy].
    + intros y1 y2 H1 H2. apply Hlip; apply (near_mono x r rho); (lra || assumption).
  - destruct Hok as [OkR [OkL Hnode]].
    set (bN := tree_bound L + tree_tau L * tree_bound R + d) in *.
    pose proof (Rmax_l (tree_peak R) (Rmax (tree_peak L + tree_bound R) bN)) as P1.
    pose proof (Rmax_r (tree_peak R) (Rmax (tree_peak L + tree_bound R) bN)) as P2.
    pose proof (Rmax_l (tree_peak L + tree_bound R) bN) as P3.
    assert (OkR' : tree_ok_near R x r) by (apply (IHR x r rho Hx Hr Hrho); [lra | exact OkR]).
    destruct (tree_error_near R x r Hx Hr OkR') as [ErrR [_ [_ BR]]].
    destruct (ErrR x (near_centre x r Hx Hr)) as [_ [Hxm _]].
    split; [exact OkR' | split; [| exact Hnode]].
    apply (IHL (exact R x) (r + tree_bound R) rho Hxm); [lra | exact Hrho | lra | exact OkL].
Qed.
