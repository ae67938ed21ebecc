(** * KLA's precision by a Möbius scan in floating point, end to end (docs/error-model.md, "KLA:
    contraction bounds"; check/kla_bound.hpp, `kla_rounding`)

    The scan forms compute λ_t = Π_t · λ₀ with Π_t = M_t ∘ … ∘ M₁ formed by some evaluation tree
    (every schedule's output is one): each leaf M = [[1 + p̄φ, ā²φ], [p̄, ā²]] formed from the inputs,
    the tree's composes (TreeRounding.v), then the application fl(fl(fl(a x) + b) / fl(fl(c x) + d))
    (FloatError.fl_apply). In FloatError.v's rounding model (no underflow):

    - [kla_leaf_fl_within]: the leaf formed as the reference forms it, φ̂ = fl(fl(Λk)k),
      [[fl(1 + fl(p̄ φ̂)), fl(fl(āā) φ̂)], [p̄, fl(āā)]], has every entry within 4 roundings of the
      exact leaf's (so its action within 8η: TreeRounding.mwithin_log_err), any sign of k;
    - [apply_log_err]: applying a computed map costs 5η in log (numerator 2, denominator 2, the
      quotient 1);
    - [fl_scan_apply]: the computed λ̂_t is within 5η + B(T) of the exact λ_t, B the tree bound of
      TreeRounding.v (leaves 2kη, nodes 4η): the recursion check/kla_bound.hpp evaluates for the scan
      forms (which charges 8η a leaf, 6η a node and 5η the application). *)

From Coq Require Import Reals Lra Lia.
From Flocq Require Import Core.
From KalmanOracle Require Import Mobius FloatError Birkhoff TreeRounding.
Open Scope R_scope.

Section Scan.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Lemma within_round_any : forall k x y, 0 <= x -> within u k x y -> within u (S k) x (fl y).
Proof. intros k x y Hx W. apply (within_round u (proj2 u_bounds)); [exact Hx | exact W | apply fl_everywhere]. Qed.

(** φ̂ = fl(fl(Λk)k) is within 2 roundings of Λk² ≥ 0, whatever the sign of k. *)
Lemma phi_within : forall Lam key, 0 <= Lam -> within u 2 (Lam * key * key) (fl (fl (Lam * key) * key)).
Proof.
  intros Lam key HL.
  destruct (fl_everywhere (Lam * key)) as [d1 [H1 E1]]. rewrite E1.
  destruct (fl_everywhere (Lam * key * (1 + d1) * key)) as [d2 [H2 E2]]. rewrite E2.
  apply Rabs_le_inv in H1. apply Rabs_le_inv in H2.
  assert (Hphi : 0 <= Lam * key * key) by (rewrite Rmult_assoc; apply Rmult_le_pos; nra).
  unfold within. simpl.
  replace (Lam * key * (1 + d1) * key * (1 + d2)) with (Lam * key * key * ((1 + d1) * (1 + d2))) by ring.
  assert ((1 - u) * ((1 - u) * 1) <= (1 + d1) * (1 + d2)) by nra.
  assert ((1 + d1) * (1 + d2) <= (1 + u) * ((1 + u) * 1)) by nra.
  split; nra.
Qed.

(** The KLA leaf as formed from the inputs, and its exact value (Models.v's kla_precision_leaf). *)
Definition kla_leaf (a p Lam key : R) : mob :=
  Mobius (1 + p * (Lam * key * key)) (a * a * (Lam * key * key)) p (a * a).

Definition kla_leaf_fl (a p Lam key : R) : mob :=
  let phi := fl (fl (Lam * key) * key) in
  Mobius (fl (1 + fl (p * phi))) (fl (fl (a * a) * phi)) p (fl (a * a)).

Theorem kla_leaf_fl_within : forall a p Lam key, 0 < a -> 0 <= p -> 0 <= Lam ->
  mwithin u 4 (kla_leaf a p Lam key) (kla_leaf_fl a p Lam key).
Proof.
  intros a p Lam key Ha Hp HL.
  pose proof (phi_within Lam key HL) as Wphi.
  assert (Hphi : 0 <= Lam * key * key) by (rewrite Rmult_assoc; apply Rmult_le_pos; nra).
  assert (Waa : within u 1 (a * a) (fl (a * a))).
  { apply within_round_any; [nra | apply within_refl]. }
  unfold kla_leaf, kla_leaf_fl, mwithin. simpl. split; [|split; [|split]].
  - (* 1 + p φ: φ 2, the product 3, the sum (1 exact) 3, rounded 4 *)
    apply within_round_any; [nra|]. apply within_add.
    + apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 0); [lia | lra | apply within_refl].
    + apply within_round_any; [nra|].
      pose proof (within_mul u (proj1 u_bounds) (proj2 u_bounds) 0 2 p (Lam * key * key) p _ Hp Hphi
                    (within_refl u p) Wphi) as W. exact W.
  - (* ā² φ: 1 + 2, rounded 4 *)
    apply within_round_any; [nra|].
    pose proof (within_mul u (proj1 u_bounds) (proj2 u_bounds) 1 2 (a * a) (Lam * key * key) _ _ ltac:(nra)
                  Hphi Waa Wphi) as W. exact W.
  - apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 0); [lia | exact Hp | apply within_refl].
  - apply (within_mono u (proj1 u_bounds) (proj2 u_bounds) 1); [lia | nra | exact Waa].
Qed.

(** Applying a computed map: 5η in log. *)
Theorem apply_log_err : forall m x, nonneg m -> 0 < x -> 0 < den m x -> 0 < apply m x ->
  0 < fl_apply fl m x /\ Rabs (ln (fl_apply fl m x) - ln (apply m x)) <= INR 5 * eta u.
Proof.
  intros m x Hm Hx Hden Hap.
  assert (Hok : apply_ok u fl m x) by (repeat split; apply fl_everywhere).
  pose proof (fl_apply_bound u (proj1 u_bounds) (proj2 u_bounds) fl 0 m m x Hm (Rlt_le _ _ Hx) Hden
                (mwithin_refl u m) Hok) as [B1 B2].
  simpl in B1, B2.
  apply ln_sandwich; [exact Hap|].
  (* (1 − u)³/(1 + u)² ≥ (1 − u)⁵ = e^{−5η}, (1 + u)³/(1 − u)² ≤ (1 − u)^{−5} = e^{5η} *)
  assert (Hu : 0 <= u < 1) by exact u_bounds.
  assert (Ee : exp (- (INR 5 * eta u)) = (1 - u) ^ 5).
  { unfold eta. replace (- (INR 5 * - ln (1 - u))) with (INR 5 * ln (1 - u)) by ring.
    rewrite <- ln_pow by lra. apply exp_ln, pow_lt; lra. }
  assert (Ef : exp (INR 5 * eta u) = (/ (1 - u)) ^ 5).
  { unfold eta. rewrite <- ln_Rinv, <- ln_pow by (try apply Rinv_0_lt_compat; lra).
    apply exp_ln, pow_lt, Rinv_0_lt_compat; lra. }
  rewrite Ee, Ef.
  assert (Hinv1 : 1 - u <= / (1 + u)).
  { apply (Rmult_le_reg_r (1 + u)); [lra|]. rewrite Rinv_l by lra. nra. }
  assert (Hinv2 : 1 + u <= / (1 - u)).
  { apply (Rmult_le_reg_r (1 - u)); [lra|]. rewrite Rinv_l by lra. nra. }
  assert (0 < / (1 + u)) by (apply Rinv_0_lt_compat; lra).
  assert (0 < / (1 - u)) by (apply Rinv_0_lt_compat; lra).
  split.
  - eapply Rle_trans; [|exact B1].
    apply Rmult_le_compat_r; [lra|].
    unfold Rdiv. simpl. rewrite !Rmult_1_r.
    replace (/ ((1 + u) * (1 + u))) with (/ (1 + u) * / (1 + u)) by (field; lra).
    assert (0 <= 1 - u) by lra.
    assert ((1 - u) * (1 - u) <= / (1 + u) * / (1 + u)) by (apply Rmult_le_compat; lra).
    assert (0 <= (1 - u) * ((1 - u) * (1 - u))) by (repeat apply Rmult_le_pos; lra).
    nra.
  - eapply Rle_trans; [exact B2|].
    apply Rmult_le_compat_r; [lra|].
    unfold Rdiv. simpl. rewrite !Rmult_1_r.
    replace (/ ((1 - u) * (1 - u))) with (/ (1 - u) * / (1 - u)) by (field; lra).
    assert ((1 + u) * ((1 + u) * (1 + u)) <= / (1 - u) * (/ (1 - u) * / (1 - u))).
    { apply Rmult_le_compat; [lra | nra | lra |]. apply Rmult_le_compat; lra. }
    assert (0 <= / (1 - u) * / (1 - u)) by (apply Rmult_le_pos; lra).
    nra.
Qed.

(** The whole scan form: λ̂_t = fl_apply (computed product) λ₀ within 5η + B(T) of λ_t. *)
Theorem fl_scan_apply : forall t x, leaves_strict u t -> FloatError.tree_ok u fl t -> 0 < x ->
  Rabs (ln (fl_apply fl (tfl fl t) x) - ln (apply (texact t) x))
    <= INR 5 * eta u + tree_bound (to_etree u fl t).
Proof.
  intros t x Hl Ht Hx.
  destruct (fl_tree_contraction u u_bounds fl t Hl Ht x Hx) as [Hpos Htree].
  pose proof (tfl_strict u u_bounds fl t Hl Ht) as [Hn [Ha Hd]].
  assert (Hden : 0 < den (tfl fl t) x).
  { unfold den. destruct Hn as (_&_&Hc&_). nra. }
  destruct (apply_log_err (tfl fl t) x Hn Hx Hden Hpos) as [_ Happ].
  replace (ln (fl_apply fl (tfl fl t) x) - ln (apply (texact t) x))
    with ((ln (fl_apply fl (tfl fl t) x) - ln (apply (tfl fl t) x))
          + (ln (apply (tfl fl t) x) - ln (apply (texact t) x))) by ring.
  eapply Rle_trans; [apply Rabs_triang | lra].
Qed.

End Scan.
