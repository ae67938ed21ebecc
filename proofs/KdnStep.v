(** * The diagonal KDN's covariance recursion in floating point: twenty roundings a step, and the
    contraction bound of the whole sequence (docs/error-model.md, "Diagonal KDN: contraction and
    a-posteriori bounds"; check/diagonal_kdn_bound.hpp)

    As KlaStep.v for KLA: the reference's binary32 step for one channel (models/diagonal.hpp, in its
    order), with the decay α̂ = exp(g) computed within 2 roundings (exp within 1 ulp),

        a = fl(α̂ α̂),  p̂ = fl(fl(a p) + ω),  u = fl(fl(fl(μ k) k) / r),  p ← fl(p̂ / fl(1 + fl(u p̂))),

    is the exact step p ↦ (α²p + ω)/(1 + u(α²p + ω)) times e^{±20η} (a 5, p̂ 7, u 3, the denominator
    12, the quotient 20: the count check/diagonal_kdn_bound.hpp charges), for any sign of k; so with
    Birkhoff.v's sequential bound and the KDN leaf's τ = (√(1 + uω) − √(uω))²,
    |ln p̂_t − ln p_t| ≤ E_t, E_0 = 0, E_t = τ_t E_{t−1} + 20η. *)

From Coq Require Import Reals Lra Lia ZArith.
From KalmanOracle Require Import FloatError Birkhoff KlaStep.
Open Scope R_scope.

Section Step.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.

(** The exact step (the leaf [[α², ω], [uα², 1 + uω]]'s action) and the reference's binary32 step. *)
Definition kdn_step (alpha mu key r omega x : R) : R :=
  (alpha * alpha * x + omega) / (1 + mu * key * key / r * (alpha * alpha * x + omega)).

Definition kdn_step_fl (alphah mu key r omega x : R) : R :=
  fl (fl (fl (fl (alphah * alphah) * x) + omega)
      / fl (1 + fl (fl (fl (fl (mu * key) * key) / r) * fl (fl (fl (alphah * alphah) * x) + omega)))).

Theorem kdn_step_fl_rel : forall alpha alphah mu key r omega x,
  0 < alpha -> rel (2 * eta u) alpha alphah -> 0 <= mu -> 0 < r -> 0 <= omega -> 0 < x ->
  rel (20 * eta u) (kdn_step alpha mu key r omega x) (kdn_step_fl alphah mu key r omega x).
Proof.
  intros alpha alphah mu key r omega x Ha Hah Hmu Hr Ho Hx. unfold kdn_step, kdn_step_fl.
  pose proof (eta_nonneg u u_bounds) as He.
  (* a = α² : 2 + 2 + 1 *)
  assert (HA : rel (5 * eta u) (alpha * alpha) (fl (alphah * alphah))).
  { eapply rel_mono; [|apply round, rel_mul; exact Hah]. lra. }
  (* p̂ = a p + ω : a p 6, + ω (exact), rounded: 7 *)
  assert (HP : rel (7 * eta u) (alpha * alpha * x + omega) (fl (fl (fl (alphah * alphah) * x) + omega))).
  { eapply rel_mono; [|apply round; apply (rel_add (6 * eta u))]; [lra | nra | exact Ho | |].
    - eapply rel_mono; [|apply round, rel_mul; [exact HA | apply rel_refl]]. lra.
    - eapply rel_mono; [|apply rel_refl]. lra. }
  (* u = μ k² / r : 3 *)
  assert (HU : rel (3 * eta u) (mu * key * key / r) (fl (fl (fl (mu * key) * key) / r))).
  { eapply rel_mono;
      [|apply round, rel_div; [lra | apply round, rel_mul; [apply round, rel_refl | apply rel_refl] | apply rel_refl]].
    lra. }
  assert (Hph : 0 <= alpha * alpha * x + omega) by nra.
  assert (Hu0 : 0 <= mu * key * key / r).
  { apply Rmult_le_pos; [rewrite Rmult_assoc; apply Rmult_le_pos; nra | left; apply Rinv_0_lt_compat; lra]. }
  (* the denominator 1 + u p̂ : u p̂ 3 + 7 + 1, the sum (1 exact), rounded: 12 *)
  assert (HD : rel (12 * eta u)
                   (1 + mu * key * key / r * (alpha * alpha * x + omega))
                   (fl (1 + fl (fl (fl (fl (mu * key) * key) / r) * fl (fl (fl (alphah * alphah) * x) + omega))))).
  { eapply rel_mono; [|apply round; apply (rel_add (11 * eta u))]; [lra | lra | apply Rmult_le_pos; assumption | |].
    - eapply rel_mono; [|apply rel_refl]. lra.
    - eapply rel_mono; [|apply round, rel_mul; [exact HU | exact HP]]. lra. }
  (* the quotient: 7 + 12 + 1 = 20 *)
  eapply rel_mono; [|apply round, rel_div; [nra | exact HP | exact HD]]. lra.
Qed.

Lemma kdn_step_act : forall alpha mu key r omega x, 0 < alpha -> 0 <= mu -> 0 < r -> 0 <= omega -> 0 < x ->
  kdn_step alpha mu key r omega x
  = act (alpha ^ 2) omega ((mu * key * key / r) * alpha ^ 2) (1 + (mu * key * key / r) * omega) x.
Proof.
  intros alpha mu key r omega x Ha Hmu Hr Ho Hx. unfold kdn_step, act.
  f_equal; ring.
Qed.

(** The whole recursion of one channel: E_0 = 0, E_t = τ_t E_{t−1} + 20η. *)
Theorem kdn_sequential_rounding : forall (alpha alphah mu key r omega : nat -> R) (x0 : R),
  (forall t, 0 < alpha t /\ rel (2 * eta u) (alpha t) (alphah t) /\ 0 <= mu t /\ 0 < r t /\ 0 <= omega t) ->
  0 < x0 ->
  forall t,
    Rabs (ln (traj (fun s => kdn_step_fl (alphah s) (mu s) (key s) (r s) (omega s)) x0 t)
          - ln (traj (fun s => kdn_step (alpha s) (mu s) (key s) (r s) (omega s)) x0 t))
    <= seq_bound (fun s => Rsqr (sqrt (1 + mu s * key s * key s / r s * omega s)
                                 - sqrt (mu s * key s * key s / r s * omega s)))
                 (fun _ => 20 * eta u) 0 t.
Proof.
  intros alpha alphah mu key r omega x0 Hparams Hx0 t.
  set (f := fun s => kdn_step (alpha s) (mu s) (key s) (r s) (omega s)).
  set (fh := fun s => kdn_step_fl (alphah s) (mu s) (key s) (r s) (omega s)).
  set (tau := fun s => Rsqr (sqrt (1 + mu s * key s * key s / r s * omega s)
                             - sqrt (mu s * key s * key s / r s * omega s))).
  assert (Hc : forall s, 0 <= mu s * key s * key s / r s).
  { intros s. destruct (Hparams s) as (_&_&Hmu&Hr&_).
    apply Rmult_le_pos; [rewrite Rmult_assoc; apply Rmult_le_pos; nra | left; apply Rinv_0_lt_compat; lra]. }
  assert (Herr : forall s, (0 < s)%nat -> log_err (fh s) (f s) (20 * eta u)).
  { intros s _ x Hx. destruct (Hparams s) as (Ha&Hah&Hmu&Hr&Ho).
    pose proof (kdn_step_fl_rel _ _ _ (key s) _ _ x Ha Hah Hmu Hr Ho Hx) as Hrel.
    assert (Hpos : 0 < f s x).
    { unfold f. rewrite kdn_step_act by assumption. unfold act.
      pose proof (Hc s) as Hcs. assert (Ha2 : 0 < alpha s ^ 2) by (apply pow_lt; exact Ha).
      assert (Hn : 0 < alpha s ^ 2 * x + omega s) by nra.
      assert (0 <= mu s * key s * key s / r s * alpha s ^ 2 * x) by
        (apply Rmult_le_pos; [apply Rmult_le_pos; lra | lra]).
      assert (0 <= mu s * key s * key s / r s * omega s) by (apply Rmult_le_pos; lra).
      apply Rdiv_lt_0_compat; lra. }
    destruct (rel_ln _ _ _ Hpos Hrel) as [Hpos' Hln]. split; [exact Hpos' | split; [exact Hpos | exact Hln]]. }
  assert (Hlip : forall s, (0 < s)%nat -> log_lipschitz (f s) (tau s)).
  { intros s _. destruct (Hparams s) as (Ha&_&Hmu&Hr&Ho).
    unfold tau. rewrite <- (kdn_leaf_tau (alpha s) (mu s * key s * key s / r s) (omega s)) by (auto; apply Hc).
    intros x y Hx Hy. unfold f. rewrite !kdn_step_act by assumption.
    pose proof (Hc s) as Hcs. assert (Ha2 : 0 < alpha s ^ 2) by (apply pow_lt; exact Ha).
    assert (0 <= mu s * key s * key s / r s * omega s) by (apply Rmult_le_pos; lra).
    apply act_log_lipschitz; [exact Ha2 | exact Ho | apply Rmult_le_pos; lra | lra | exact Hx | exact Hy]. }
  destruct (sequential_error f fh tau (fun _ => 20 * eta u) x0 x0 Hx0 Hx0 Herr Hlip t) as [_ [_ Hb]].
  rewrite Rminus_eq_0, Rabs_R0 in Hb. exact Hb.
Qed.

End Step.
