(** * The isotropic KDN's covariance recursion in floating point: 3K + 20 roundings a step
    (docs/error-model.md, "Isotropic KDN: contraction and a-posteriori bounds";
    check/isotropic_kdn_bound.hpp)

    As KdnStep.v for the diagonal form: the reference's binary32 step for one head
    (models/isotropic.hpp, in its order), with each decay α̂ᵢ = exp(gᵢ) within 2 roundings,

        a = fl(fl(Σᵢ fl(α̂ᵢ α̂ᵢ)) / K),  ‖k‖² = fl(Σᵢ fl(kᵢ kᵢ))   (sums from 0, in index order),
        b̂ = fl(fl(a b) + ω),  u = fl(fl(μ ‖k‖²) / fl(K r)),  b ← fl(b̂ / fl(1 + fl(u b̂))),

    is the exact step b ↦ (a b + ω)/(1 + u(a b + ω)) times e^{±(3K + 20)η}: a K + 5, b̂ K + 7, u K + 3,
    the denominator 2K + 12, the quotient 3K + 20 (the count check/isotropic_kdn_bound.hpp charges).
    A sum of K non-negative terms from 0 costs K − 1 roundings because adding a rounded value to 0 is
    exact ([fl_idem]: rounding a rounded value changes nothing, true of every rounding to a format). *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep.
Open Scope R_scope.
Import ListNotations.

Section Step.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.
Hypothesis fl_idem : forall x, fl (fl x) = fl x.

Let round := rel_round u u_bounds fl fl_everywhere.

(** A sum as the reference computes it: s ← fl(s + cᵢ) over the computed terms cᵢ, in order,
    beside the exact terms eᵢ (pairs (eᵢ, cᵢ)). *)
Fixpoint sum_from (s : R) (l : list (R * R)) : R :=
  match l with [] => s | (_, c) :: r => sum_from (fl (s + c)) r end.

Fixpoint sum_exact (l : list (R * R)) : R :=
  match l with [] => 0 | (e, _) :: r => e + sum_exact r end.

(** Every exact term non-negative and its computed term within k. *)
Definition terms_ok (k : R) (l : list (R * R)) : Prop := forall e c, In (e, c) l -> 0 <= e /\ rel k e c.

Lemma sum_exact_nonneg : forall k l, terms_ok k l -> 0 <= sum_exact l.
Proof.
  intros k l. induction l as [|[e c] r IH]; simpl; intros H; [lra|].
  assert (0 <= e) by (apply (H e c); left; reflexivity).
  assert (0 <= sum_exact r) by (apply IH; intros e' c' Hi; apply H; right; exact Hi). lra.
Qed.

(** From a start within k + jη of s₀ ≥ 0: within k + (j + n)η after n more terms. *)
Lemma sum_from_rel : forall l k j s s0, 0 <= s0 -> rel (k + INR j * eta u) s0 s -> terms_ok k l ->
  rel (k + INR (j + length l) * eta u) (s0 + sum_exact l) (sum_from s l).
Proof.
  induction l as [|[e c] r IH]; intros k j s s0 Hs0 Hs Hl; simpl.
  - rewrite Nat.add_0_r, Rplus_0_r. exact Hs.
  - destruct (Hl e c (or_introl eq_refl)) as [He Hr].
    assert (Hr' : terms_ok k r) by (intros e' c' Hi; apply Hl; right; exact Hi).
    replace (s0 + (e + sum_exact r)) with ((s0 + e) + sum_exact r) by ring.
    replace (j + S (length r))%nat with (S j + length r)%nat by lia.
    apply IH; [lra | | exact Hr'].
    rewrite S_INR. replace (k + (INR j + 1) * eta u) with ((k + INR j * eta u) + eta u) by ring.
    apply round. apply rel_add; [exact Hs0 | exact He | exact Hs |].
    eapply rel_mono; [|exact Hr]. pose proof (pos_INR j). pose proof (eta_nonneg u u_bounds). nra.
Qed.

(** From 0, the first term a rounded value: fl(0 + fl p) = fl p, so n ≥ 1 terms cost k + (n − 1)η. *)
Lemma sum_rel : forall l k e p, 0 <= e -> rel k e (fl p) -> terms_ok k l ->
  rel (k + INR (length l) * eta u) (sum_exact ((e, fl p) :: l)) (sum_from 0 ((e, fl p) :: l)).
Proof.
  intros l k e p He Hr Hl. simpl.
  rewrite Rplus_0_l, fl_idem.
  replace (length l) with (0 + length l)%nat by lia.
  apply sum_from_rel; [exact He | | exact Hl].
  simpl. rewrite Rmult_0_l, Rplus_0_r. exact Hr.
Qed.

(** The exact step of one head, from the exact sums D = Σᵢ αᵢ² and N = ‖k‖², and the reference's
    binary32 step from their computed values (K the number of channels, exact). *)
Definition iso_step (Kr mu r omega D N x : R) : R :=
  (D / Kr * x + omega) / (1 + mu * N / (Kr * r) * (D / Kr * x + omega)).

Definition iso_step_fl (Kr mu r omega Dc Nc x : R) : R :=
  fl (fl (fl (fl (Dc / Kr) * x) + omega)
      / fl (1 + fl (fl (fl (mu * Nc) / fl (Kr * r)) * fl (fl (fl (Dc / Kr) * x) + omega)))).

Theorem iso_step_fl_rel : forall Kr mu r omega D N Dc Nc x,
  1 <= Kr -> 0 <= mu -> 0 < r -> 0 <= omega -> 0 < D -> 0 <= N -> 0 < x ->
  rel ((Kr + 4) * eta u) D Dc -> rel (Kr * eta u) N Nc ->
  rel ((3 * Kr + 20) * eta u) (iso_step Kr mu r omega D N x) (iso_step_fl Kr mu r omega Dc Nc x).
Proof.
  intros Kr mu r omega D N Dc Nc x HK Hmu Hr Ho HD HN Hx HDc HNc. unfold iso_step, iso_step_fl.
  pose proof (eta_nonneg u u_bounds) as He.
  (* a = D / K : K + 5 *)
  assert (HA : rel ((Kr + 5) * eta u) (D / Kr) (fl (Dc / Kr))).
  { eapply rel_mono; [|apply round, rel_div; [lra | exact HDc | apply rel_refl]]. lra. }
  assert (Ha : 0 < D / Kr) by (apply Rdiv_lt_0_compat; lra).
  (* b̂ = a b + ω : K + 7 *)
  assert (HP : rel ((Kr + 7) * eta u) (D / Kr * x + omega) (fl (fl (fl (Dc / Kr) * x) + omega))).
  { eapply rel_mono; [|apply round; apply (rel_add ((Kr + 6) * eta u))]; [lra | nra | exact Ho | |].
    - eapply rel_mono; [|apply round, rel_mul; [exact HA | apply rel_refl]]. lra.
    - eapply rel_mono; [|apply rel_refl]. nra. }
  (* u = μ N / (K r) : K + 3 *)
  assert (HU : rel ((Kr + 3) * eta u) (mu * N / (Kr * r)) (fl (fl (mu * Nc) / fl (Kr * r)))).
  { eapply rel_mono;
      [|apply round, rel_div; [nra | apply round, rel_mul; [apply rel_refl | exact HNc]
                              | apply round, rel_refl]].
    lra. }
  assert (Hph : 0 <= D / Kr * x + omega) by nra.
  assert (Hu0 : 0 <= mu * N / (Kr * r)).
  { apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; nra]. }
  (* the denominator 1 + u b̂ : 2K + 12 *)
  assert (HDen : rel ((2 * Kr + 12) * eta u) (1 + mu * N / (Kr * r) * (D / Kr * x + omega))
                     (fl (1 + fl (fl (fl (mu * Nc) / fl (Kr * r)) * fl (fl (fl (Dc / Kr) * x) + omega))))).
  { eapply rel_mono; [|apply round; apply (rel_add ((2 * Kr + 11) * eta u))];
      [lra | lra | apply Rmult_le_pos; assumption | |].
    - eapply rel_mono; [|apply rel_refl]. nra.
    - eapply rel_mono; [|apply round, rel_mul; [exact HU | exact HP]]. lra. }
  (* the quotient: 3K + 20 *)
  eapply rel_mono; [|apply round, rel_div; [nra | exact HP | exact HDen]]. lra.
Qed.

(** With the sums as the reference forms them: the decays' squares each within 5 (α̂ within 2: the
    product 4, its rounding 1), the keys' squares within 1, K = 1 + (terms after the first). *)
Corollary iso_step_sums_rel : forall mu r omega x e0 p0 ds f0 q0 ks,
  length ds = length ks -> 0 <= mu -> 0 < r -> 0 <= omega -> 0 < x -> 0 < e0 -> 0 <= f0 ->
  rel (5 * eta u) e0 (fl p0) -> terms_ok (5 * eta u) ds ->
  rel (eta u) f0 (fl q0) -> terms_ok (eta u) ks ->
  let Kr := INR (S (length ds)) in
  rel ((3 * Kr + 20) * eta u)
      (iso_step Kr mu r omega (sum_exact ((e0, fl p0) :: ds)) (sum_exact ((f0, fl q0) :: ks)) x)
      (iso_step_fl Kr mu r omega (sum_from 0 ((e0, fl p0) :: ds)) (sum_from 0 ((f0, fl q0) :: ks)) x).
Proof.
  intros mu r omega x e0 p0 ds f0 q0 ks Hlen Hmu Hr Ho Hx He0 Hf0 H0 Hds H1 Hks Kr.
  pose proof (pos_INR (length ds)) as Hn.
  assert (HKr : Kr = INR (length ds) + 1) by (unfold Kr; rewrite S_INR; reflexivity).
  apply iso_step_fl_rel; try assumption.
  - lra.
  - simpl. pose proof (sum_exact_nonneg _ ds Hds). lra.
  - simpl. pose proof (sum_exact_nonneg _ ks Hks). lra.
  - eapply rel_mono; [|apply sum_rel; [lra | exact H0 | exact Hds]]. rewrite HKr.
    pose proof (eta_nonneg u u_bounds). lra.
  - eapply rel_mono; [|apply sum_rel; [exact Hf0 | exact H1 | exact Hks]]. rewrite HKr, <- Hlen.
    pose proof (eta_nonneg u u_bounds). lra.
Qed.

Lemma iso_step_act : forall Kr mu r omega D N x,
  iso_step Kr mu r omega D N x
  = act (D / Kr) omega (mu * N / (Kr * r) * (D / Kr)) (1 + mu * N / (Kr * r) * omega) x.
Proof. intros. unfold iso_step, act. f_equal; ring. Qed.

(** One head's whole recursion: E_0 = 0, E_t = τ_t E_{t−1} + (3K + 20)η, τ_t the isotropic leaf's. *)
Theorem iso_sequential_rounding : forall (Kr : R) (mu r omega D N Dc Nc : nat -> R) (x0 : R),
  1 <= Kr ->
  (forall t, 0 <= mu t /\ 0 < r t /\ 0 <= omega t /\ 0 < D t /\ 0 <= N t /\
             rel ((Kr + 4) * eta u) (D t) (Dc t) /\ rel (Kr * eta u) (N t) (Nc t)) ->
  0 < x0 ->
  forall t,
    Rabs (ln (traj (fun s => iso_step_fl Kr (mu s) (r s) (omega s) (Dc s) (Nc s)) x0 t)
          - ln (traj (fun s => iso_step Kr (mu s) (r s) (omega s) (D s) (N s)) x0 t))
    <= seq_bound (fun s => Rsqr (sqrt (1 + mu s * N s / (Kr * r s) * omega s)
                                 - sqrt (mu s * N s / (Kr * r s) * omega s)))
                 (fun _ => (3 * Kr + 20) * eta u) 0 t.
Proof.
  intros Kr mu r omega D N Dc Nc x0 HK Hp Hx0 t.
  set (f := fun s => iso_step Kr (mu s) (r s) (omega s) (D s) (N s)).
  set (fh := fun s => iso_step_fl Kr (mu s) (r s) (omega s) (Dc s) (Nc s)).
  set (tau := fun s => Rsqr (sqrt (1 + mu s * N s / (Kr * r s) * omega s) - sqrt (mu s * N s / (Kr * r s) * omega s))).
  assert (Hc : forall s, 0 <= mu s * N s / (Kr * r s)).
  { intros s. destruct (Hp s) as (Hmu&Hr&_&_&HN&_). apply Rmult_le_pos; [nra | left; apply Rinv_0_lt_compat; nra]. }
  assert (Ha : forall s, 0 < D s / Kr).
  { intros s. destruct (Hp s) as (_&_&_&HD&_). apply Rdiv_lt_0_compat; lra. }
  assert (Herr : forall s, (0 < s)%nat -> log_err (fh s) (f s) ((3 * Kr + 20) * eta u)).
  { intros s _ x Hx. destruct (Hp s) as (Hmu&Hr&Ho&HD&HN&HDc&HNc).
    pose proof (iso_step_fl_rel Kr _ _ _ _ _ _ _ x HK Hmu Hr Ho HD HN Hx HDc HNc) as Hrel.
    assert (Hpos : 0 < f s x).
    { unfold f. rewrite iso_step_act. unfold act. pose proof (Hc s) as Hcs. pose proof (Ha s) as Has.
      assert (0 < D s / Kr * x + omega s) by nra.
      assert (0 <= mu s * N s / (Kr * r s) * (D s / Kr) * x) by (apply Rmult_le_pos; [apply Rmult_le_pos|]; lra).
      assert (0 <= mu s * N s / (Kr * r s) * omega s) by (apply Rmult_le_pos; lra).
      apply Rdiv_lt_0_compat; lra. }
    destruct (rel_ln _ _ _ Hpos Hrel) as [Hpos' Hln]. split; [exact Hpos' | split; [exact Hpos | exact Hln]]. }
  assert (Hlip : forall s, (0 < s)%nat -> log_lipschitz (f s) (tau s)).
  { intros s _. destruct (Hp s) as (Hmu&Hr&Ho&_).
    pose proof (Hc s) as Hcs. pose proof (Ha s) as Has.
    unfold tau. rewrite <- (iso_leaf_tau (D s / Kr) (mu s * N s / (Kr * r s)) (omega s)) by assumption.
    intros x y Hx Hy. unfold f. rewrite !iso_step_act.
    assert (0 <= mu s * N s / (Kr * r s) * omega s) by (apply Rmult_le_pos; lra).
    apply act_log_lipschitz; [exact Has | exact Ho | apply Rmult_le_pos; lra | lra | exact Hx | exact Hy]. }
  destruct (sequential_error f fh tau (fun _ => (3 * Kr + 20) * eta u) x0 x0 Hx0 Hx0 Herr Hlip t) as [_ [_ Hb]].
  rewrite Rminus_eq_0, Rabs_R0 in Hb. exact Hb.
Qed.

End Step.
