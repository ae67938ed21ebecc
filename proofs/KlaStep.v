(** * KLA's precision recursion in floating point: four roundings a step, and the contraction
    bound of the whole sequence (docs/error-model.md, "KLA: contraction bounds"; check/kla_bound.hpp)

    Birkhoff.v proves the contraction bound over ℝ with abstract per-step errors: a sequential
    recursion whose computed step is within δ_t (in log) of the exact step, and whose exact step is
    τ_t-Lipschitz in Hilbert's metric, stays within E_t = τ_t E_{t−1} + δ_t ([sequential_error]).
    This file instantiates δ_t for the reference's binary32 step (models/kla.hpp, in its order)

        λ̂_t = fl(fl(λ̂_{t−1} / fl(fl(ā ā) + fl(p̄ λ̂_{t−1}))) + fl(fl(Λ k) k)),

    in FloatError.v's model (every operation one relative error of at most u: Flocq's FLX rounding,
    where it holds everywhere, or binary32 while no result underflows or overflows, the hypothesis
    the generator checks): the computed step is the exact one times e^{±4η}, η = −ln(1 − u) (the
    denominator 2 roundings deep in a positive sum, the quotient 1, φ = Λk² 2, the sum 1), for any
    sign of k and p̄ = 0, φ = 0 included; so |ln λ̂_t − ln λ_t| ≤ E_t with E_0 = 0,
    E_t = τ_t E_{t−1} + 4η and τ_t = (√(1 + z_t) − √z_t)², z_t = p̄_t φ_t: the bound the fixtures
    store for KLA's precision (`sequential_error` there). *)

From Coq Require Import Reals Lra Lia ZArith.
From KalmanOracle Require Import FloatError Birkhoff.
Open Scope R_scope.

Section Step.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

(** [rel k x y]: y = x θ with θ ∈ [e^{−k}, e^{k}], for x of any sign: "within k in log". *)
Definition rel (k x y : R) : Prop := exists th, exp (- k) <= th <= exp k /\ y = x * th.

Lemma rel_refl : forall x, rel 0 x x.
Proof. intros x. exists 1. rewrite Ropp_0, exp_0. split; [lra | ring]. Qed.

Lemma rel_mono : forall k k' x y, k <= k' -> rel k x y -> rel k' x y.
Proof.
  intros k k' x y Hk [th [[H1 H2] ->]]. exists th. split; [|reflexivity].
  assert (exp (- k') <= exp (- k)) by (destruct (Req_dec k k'); [subst; lra|left; apply exp_increasing; lra]).
  assert (exp k <= exp k') by (destruct (Req_dec k k'); [subst; lra|left; apply exp_increasing; lra]).
  lra.
Qed.

(** One rounding: 1 + δ ∈ [e^{−η}, e^{η}] (Birkhoff.ln_one_plus_delta). *)
Lemma rel_round : forall k x y, rel k x y -> rel (k + eta u) x (fl y).
Proof.
  intros k x y [th [[H1 H2] ->]].
  destruct (fl_everywhere (x * th)) as [d [Hd Hfl]]. rewrite Hfl.
  pose proof (ln_one_plus_delta u d u_bounds Hd) as Hln.
  assert (Hpos : 0 < 1 + d) by (apply abs_le_elim in Hd; lra).
  apply abs_le_elim in Hln. fold (eta u) in Hln.
  assert (E1 : exp (- eta u) <= 1 + d).
  { rewrite <- (exp_ln (1 + d)) by exact Hpos.
    destruct (Req_dec (- eta u) (ln (1 + d))) as [->|]; [lra | left; apply exp_increasing; lra]. }
  assert (E2 : 1 + d <= exp (eta u)).
  { rewrite <- (exp_ln (1 + d)) by exact Hpos.
    destruct (Req_dec (ln (1 + d)) (eta u)) as [->|]; [lra | left; apply exp_increasing; lra]. }
  exists (th * (1 + d)). split; [|ring].
  assert (0 < exp (- k)) by apply exp_pos. assert (0 < exp (- eta u)) by apply exp_pos.
  rewrite Ropp_plus_distr, !exp_plus. split; nra.
Qed.

Lemma rel_mul : forall k1 k2 x y x' y', rel k1 x x' -> rel k2 y y' -> rel (k1 + k2) (x * y) (x' * y').
Proof.
  intros k1 k2 x y x' y' [t1 [[A1 A2] ->]] [t2 [[B1 B2] ->]].
  exists (t1 * t2). split; [|ring].
  assert (0 < exp (- k1)) by apply exp_pos. assert (0 < exp (- k2)) by apply exp_pos.
  rewrite Ropp_plus_distr, !exp_plus. split; nra.
Qed.

Lemma rel_div : forall k1 k2 x y x' y', y <> 0 -> rel k1 x x' -> rel k2 y y' ->
  rel (k1 + k2) (x / y) (x' / y').
Proof.
  intros k1 k2 x y x' y' Hy [t1 [[A1 A2] ->]] [t2 [[B1 B2] ->]].
  assert (0 < exp (- k2)) by apply exp_pos. assert (Ht2 : 0 < t2) by lra.
  assert (0 < exp (- k1)) by apply exp_pos.
  (* 1/t2 ∈ [e^{−k2}, e^{k2}] *)
  assert (I1 : exp (- k2) <= / t2).
  { rewrite exp_Ropp. apply Rinv_le_contravar; assumption. }
  assert (I2 : / t2 <= exp k2).
  { replace (exp k2) with (/ exp (- k2)) by (rewrite exp_Ropp, Rinv_inv; reflexivity).
    apply Rinv_le_contravar; [apply exp_pos | assumption]. }
  exists (t1 * / t2). split.
  - rewrite Ropp_plus_distr, !exp_plus. split.
    + apply Rmult_le_compat; lra.
    + apply Rmult_le_compat; [lra | left; apply Rinv_0_lt_compat; lra | lra | lra].
  - field. split; lra.
Qed.

(** A sum of non-negative terms is within the larger of their counts: here both k. *)
Lemma rel_add : forall k x y x' y', 0 <= x -> 0 <= y -> rel k x x' -> rel k y y' -> rel k (x + y) (x' + y').
Proof.
  intros k x y x' y' Hx Hy [t1 [[A1 A2] ->]] [t2 [[B1 B2] ->]].
  destruct (Req_dec (x + y) 0) as [H0|H0].
  - (* both zero: x' + y' = 0 *)
    assert (x = 0) by lra. assert (y = 0) by lra. subst. exists t1. split; [lra | ring].
  - assert (Hs : 0 < x + y) by lra.
    assert (L1 : x * exp (- k) <= x * t1) by (apply Rmult_le_compat_l; lra).
    assert (L2 : y * exp (- k) <= y * t2) by (apply Rmult_le_compat_l; lra).
    assert (U1 : x * t1 <= x * exp k) by (apply Rmult_le_compat_l; lra).
    assert (U2 : y * t2 <= y * exp k) by (apply Rmult_le_compat_l; lra).
    exists ((x * t1 + y * t2) / (x + y)). split; [|field; lra].
    split.
    + apply (Rmult_le_reg_r (x + y)); [exact Hs|].
      unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
    + apply (Rmult_le_reg_r (x + y)); [exact Hs|].
      unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
Qed.

Lemma rel_ln : forall k x y, 0 < x -> rel k x y -> 0 < y /\ Rabs (ln y - ln x) <= k.
Proof.
  intros k x y Hx [th [[H1 H2] ->]].
  assert (0 < exp (- k)) by apply exp_pos.
  apply ln_sandwich; [exact Hx|]. split; nra.
Qed.

(** The exact step and the reference's binary32 step (models/kla.hpp, in its order). *)
Definition kla_step (a p Lam key x : R) : R := x / (a * a + p * x) + Lam * key * key.

Definition kla_step_fl (a p Lam key x : R) : R :=
  fl (fl (x / fl (fl (a * a) + fl (p * x))) + fl (fl (Lam * key) * key)).

Theorem kla_step_fl_rel : forall a p Lam key x, 0 < a -> 0 <= p -> 0 <= Lam -> 0 < x ->
  rel (4 * eta u) (kla_step a p Lam key x) (kla_step_fl a p Lam key x).
Proof.
  intros a p Lam key x Ha Hp HL Hx. unfold kla_step, kla_step_fl.
  pose proof (eta_nonneg u u_bounds) as He.
  (* the denominator: a positive sum of two rounded products, rounded: 2η *)
  assert (Hden : rel (eta u + eta u) (a * a + p * x) (fl (fl (a * a) + fl (p * x)))).
  { apply rel_round. apply rel_add; [nra | nra | |];
      (replace (eta u) with (0 + eta u) by ring; apply rel_round, rel_refl). }
  (* the quotient, rounded: 3η *)
  assert (Hq : rel (0 + (eta u + eta u) + eta u) (x / (a * a + p * x)) (fl (x / fl (fl (a * a) + fl (p * x))))).
  { apply rel_round. apply rel_div; [nra | apply rel_refl | exact Hden]. }
  (* φ = Λk², two roundings whatever the sign of k *)
  assert (Hphi : rel (0 + eta u + 0 + eta u) (Lam * key * key) (fl (fl (Lam * key) * key))).
  { apply rel_round. apply rel_mul; [apply rel_round, rel_refl | apply rel_refl]. }
  (* the sum of two non-negative terms, rounded: 4η *)
  replace (4 * eta u) with (3 * eta u + eta u) by ring.
  apply rel_round. apply rel_add.
  - apply Rlt_le, Rdiv_lt_0_compat; nra.
  - assert (0 <= key * key) by nra. nra.
  - eapply rel_mono; [|exact Hq]. lra.
  - eapply rel_mono; [|exact Hphi]. lra.
Qed.

(** The GPU kernel's step (gpu/include/kalman_oracle/gpu/models/kla.cuh, kla_element_step): the
    denominator by one fused multiply-add, fma(p̄, λ, fl(ā ā)) = fl(p̄ λ + fl(ā ā)), the rest as the
    reference. Still within 4η of the exact step: the fused p̄λ term carries one rounding where the
    reference's carries two, the ā² term two as before. So the fixtures' KLA precision bounds cover
    the kernel's order too. *)
Definition kla_step_fma (a p Lam key x : R) : R :=
  fl (fl (x / fl (p * x + fl (a * a))) + fl (fl (Lam * key) * key)).

Theorem kla_step_fma_rel : forall a p Lam key x, 0 < a -> 0 <= p -> 0 <= Lam -> 0 < x ->
  rel (4 * eta u) (kla_step a p Lam key x) (kla_step_fma a p Lam key x).
Proof.
  intros a p Lam key x Ha Hp HL Hx. unfold kla_step, kla_step_fma.
  pose proof (eta_nonneg u u_bounds) as He.
  assert (Hden : rel (2 * eta u) (a * a + p * x) (fl (p * x + fl (a * a)))).
  { rewrite (Rplus_comm (a * a)). eapply rel_mono; [|apply rel_round, rel_add; [nra | nra | |]].
    - instantiate (1 := eta u). lra.
    - eapply rel_mono; [|apply rel_refl]. lra.
    - replace (eta u) with (0 + eta u) by ring. apply rel_round, rel_refl. }
  assert (Hq : rel (3 * eta u) (x / (a * a + p * x)) (fl (x / fl (p * x + fl (a * a))))).
  { eapply rel_mono; [|apply rel_round, rel_div; [nra | apply rel_refl | exact Hden]]. lra. }
  assert (Hphi : rel (2 * eta u) (Lam * key * key) (fl (fl (Lam * key) * key))).
  { eapply rel_mono; [|apply rel_round, rel_mul; [apply rel_round, rel_refl | apply rel_refl]]. lra. }
  eapply rel_mono; [|apply rel_round, (rel_add (3 * eta u))]; [lra | | | exact Hq |].
  - apply Rlt_le, Rdiv_lt_0_compat; nra.
  - assert (0 <= key * key) by nra. nra.
  - eapply rel_mono; [|exact Hphi]. lra.
Qed.

(** The exact step is the action of the KLA leaf [[1 + p̄φ, ā²φ], [p̄, ā²]] (Birkhoff.v). *)
Lemma kla_step_act : forall a p Lam key x, 0 < a -> 0 <= p -> 0 < x ->
  kla_step a p Lam key x = act (1 + p * (Lam * key * key)) (a ^ 2 * (Lam * key * key)) p (a ^ 2) x.
Proof.
  intros a p Lam key x Ha Hp Hx. unfold kla_step, act.
  assert (0 < a * a + p * x) by nra.
  field. apply Rgt_not_eq. nra.
Qed.

(** The whole recursion: λ̂_t within E_t of λ_t in log, E_0 = 0, E_t = τ_t E_{t−1} + 4η. *)
Theorem kla_sequential_rounding : forall (a p Lam key : nat -> R) (x0 : R),
  (forall t, 0 < a t /\ 0 <= p t /\ 0 <= Lam t) -> 0 < x0 ->
  forall t,
    Rabs (ln (traj (fun s => kla_step_fl (a s) (p s) (Lam s) (key s)) x0 t)
          - ln (traj (fun s => kla_step (a s) (p s) (Lam s) (key s)) x0 t))
    <= seq_bound (fun s => Rsqr (sqrt (1 + p s * (Lam s * key s * key s)) - sqrt (p s * (Lam s * key s * key s))))
                 (fun _ => 4 * eta u) 0 t.
Proof.
  intros a p Lam key x0 Hparams Hx0 t.
  set (f := fun s => kla_step (a s) (p s) (Lam s) (key s)).
  set (fh := fun s => kla_step_fl (a s) (p s) (Lam s) (key s)).
  set (tau := fun s => Rsqr (sqrt (1 + p s * (Lam s * key s * key s)) - sqrt (p s * (Lam s * key s * key s)))).
  assert (Herr : forall s, (0 < s)%nat -> log_err (fh s) (f s) (4 * eta u)).
  { intros s _ x Hx. destruct (Hparams s) as [Ha [Hp HL]].
    pose proof (kla_step_fl_rel (a s) (p s) (Lam s) (key s) x Ha Hp HL Hx) as Hr.
    assert (Hpos : 0 < f s x).
    { unfold f, kla_step. assert (0 < x / (a s * a s + p s * x)) by (apply Rdiv_lt_0_compat; nra).
      assert (0 <= Lam s * key s * key s) by (rewrite Rmult_assoc; apply Rmult_le_pos; nra). lra. }
    destruct (rel_ln _ _ _ Hpos Hr) as [Hpos' Hln]. split; [exact Hpos' | split; [exact Hpos | exact Hln]]. }
  assert (Hlip : forall s, (0 < s)%nat -> log_lipschitz (f s) (tau s)).
  { intros s _. destruct (Hparams s) as [Ha [Hp HL]].
    assert (Hphi : 0 <= Lam s * key s * key s) by (rewrite Rmult_assoc; apply Rmult_le_pos; nra).
    unfold tau. rewrite <- (kla_leaf_tau (a s) (Lam s * key s * key s) (p s)) by assumption.
    intros x y Hx Hy. unfold f. rewrite !kla_step_act by assumption.
    apply act_log_lipschitz; [nra | apply Rmult_le_pos; [apply pow_le; lra | exact Hphi] | exact Hp
                             | apply pow_lt; exact Ha | exact Hx | exact Hy]. }
  destruct (sequential_error f fh tau (fun _ => 4 * eta u) x0 x0 Hx0 Hx0 Herr Hlip t) as [_ [_ H]].
  rewrite Rminus_eq_0, Rabs_R0 in H. exact H.
Qed.

End Step.

(** In Flocq's FLX rounding to nearest (FloatError.v Part 2: precision p, no underflow or overflow)
    the model holds everywhere, so the bound holds for every KLA sequence; with p = 24 this is
    binary32 wherever no result is subnormal or overflows. *)
Corollary kla_sequential_flx : forall (prec : Z) (choice : Z -> bool), (0 < prec)%Z ->
  forall (a p Lam key : nat -> R) (x0 : R),
  (forall t, 0 < a t /\ 0 <= p t /\ 0 <= Lam t) -> 0 < x0 ->
  forall t,
    Rabs (ln (traj (fun s => kla_step_fl (rn prec choice) (a s) (p s) (Lam s) (key s)) x0 t)
          - ln (traj (fun s => kla_step (a s) (p s) (Lam s) (key s)) x0 t))
    <= seq_bound (fun s => Rsqr (sqrt (1 + p s * (Lam s * key s * key s)) - sqrt (p s * (Lam s * key s * key s))))
                 (fun _ => 4 * eta (u_flx prec)) 0 t.
Proof.
  intros prec choice Hprec a p Lam key x0 Hparams Hx0 t.
  apply kla_sequential_rounding; try assumption.
  - split; [apply u_flx_nonneg | apply u_flx_lt_1; exact Hprec].
  - apply rn_ok. exact Hprec.
Qed.
