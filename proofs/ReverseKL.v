(** * The reverse-KL (mean-field) projection onto diagonal Gaussians: docs/math.md §1 and §4;
    reference/include/kalman_oracle/models/diagonal.hpp.

    Over all diagonal Gaussians q = N(m, diag(s)) (s > 0) the reverse KL divergence
    KL(q ‖ N(μ⋆, Σ⋆)), Λ⋆ = Σ⋆⁻¹ positive definite, is minimised exactly at m = μ⋆ and
    sᵢ = 1/Λ⋆ᵢᵢ, and nowhere else ([rkl_projection_min], [rkl_projection_unique]).  For the
    one-step posterior of the diagonal KDN's prior N(diag(α) S, diag(p̂)) that minimiser is the
    diagonal KDN's own step with μ = 1: its memory column and its pᵢ
    ([diagonal_kdn_is_reverse_kl_projection]).

    Vectors are functions [nat -> R] of a dimension K (entries 0 … K−1), matrices
    [nat -> nat -> R], sums [vsum], as in Models.v; two vectors are equal when their entries
    0 … K−1 are. *)

From Coq Require Import Reals Lra Lia.
From KalmanOracle Require Import Models.
Open Scope R_scope.

(** ** Finite sums of non-negative terms *)

Lemma vsum_minus : forall n f g, vsum n (fun i => f i - g i) = vsum n f - vsum n g.
Proof. induction n as [|n IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma vsum_nonneg : forall n f, (forall i, (i < n)%nat -> 0 <= f i) -> 0 <= vsum n f.
Proof.
  induction n as [|n IH]; intros f H; simpl; [lra|].
  assert (0 <= vsum n f) by (apply IH; intros; apply H; lia).
  assert (0 <= f n) by (apply H; lia). lra.
Qed.

(** A sum of non-negative terms is positive as soon as one term is. *)
Lemma vsum_pos : forall n f i0, (forall i, (i < n)%nat -> 0 <= f i) -> (i0 < n)%nat ->
  0 < f i0 -> 0 < vsum n f.
Proof.
  induction n as [|n IH]; intros f i0 H Hi Hf; [lia|]. simpl.
  assert (0 <= vsum n f) by (apply vsum_nonneg; intros; apply H; lia).
  assert (0 <= f n) by (apply H; lia).
  destruct (Nat.eq_dec i0 n) as [->|Hne]; [lra|].
  assert (0 < vsum n f) by (apply (IH f i0); [intros; apply H; lia|lia|exact Hf]). lra.
Qed.

(** ... and a sum of non-negative terms that is 0 has every term 0. *)
Lemma vsum_nonneg_zero : forall n f, (forall i, (i < n)%nat -> 0 <= f i) -> vsum n f = 0 ->
  forall i, (i < n)%nat -> f i = 0.
Proof.
  intros n f H Hs i Hi. destruct (Req_dec (f i) 0) as [E|E]; [exact E|].
  assert (0 < vsum n f) by (apply (vsum_pos n f i H Hi); specialize (H i Hi); lra). lra.
Qed.

(** Either all K entries of a vector are 0 or one of them is not. *)
Lemma vec_zero_dec : forall n (x : nat -> R),
  (forall i, (i < n)%nat -> x i = 0) \/ (exists i, (i < n)%nat /\ x i <> 0).
Proof.
  induction n as [|n IH]; intros x; [left; intros; lia|].
  destruct (IH x) as [H|[i [Hi Hx]]].
  - destruct (Req_dec (x n) 0) as [Hn|Hn].
    + left. intros i Hi. destruct (Nat.eq_dec i n) as [->|Hne]; [exact Hn|apply H; lia].
    + right. exists n. split; [lia|exact Hn].
  - right. exists i. split; [lia|exact Hx].
Qed.

(** ** ln x ≤ x − 1, with equality only at x = 1 *)

Definition kl_gap (x : R) : R := x - 1 - ln x.

Lemma ln_le_minus_one : forall x, 0 < x -> ln x <= x - 1.
Proof.
  intros x Hx. pose proof (exp_ineq1_le (ln x)) as H. rewrite exp_ln in H by exact Hx. lra.
Qed.

Lemma ln_lt_minus_one : forall x, 0 < x -> x <> 1 -> ln x < x - 1.
Proof.
  intros x Hx H1.
  assert (Hl : ln x <> 0).
  { intro H0. apply H1. rewrite <- (exp_ln x Hx), H0. apply exp_0. }
  pose proof (exp_ineq1 (ln x) Hl) as H. rewrite exp_ln in H by exact Hx. lra.
Qed.

Lemma kl_gap_nonneg : forall x, 0 < x -> 0 <= kl_gap x.
Proof. intros x Hx. unfold kl_gap. pose proof (ln_le_minus_one x Hx). lra. Qed.

Lemma kl_gap_zero : forall x, 0 < x -> kl_gap x = 0 -> x = 1.
Proof.
  intros x Hx H0. destruct (Req_dec x 1) as [E|E]; [exact E|].
  pose proof (ln_lt_minus_one x Hx E). unfold kl_gap in H0. lra.
Qed.

Section ReverseKL.
Variable K : nat.

(** ** The objective *)

(** The quadratic form xᵀ L x = Σᵢ xᵢ Σⱼ Lᵢⱼ xⱼ, with Models.v's [dot] and [matvec]. *)
Definition quad (L : nat -> nat -> R) (x : nat -> R) : R := dot K x (matvec K L x).

(** L is positive definite: xᵀ L x > 0 for every x ≠ 0 (some entry 0 … K−1 non-zero).
    Symmetry is not needed below (a quadratic form and a diagonal only see the symmetric
    part); the precision of §1–§4 is symmetric anyway. *)
Definition pos_def (L : nat -> nat -> R) : Prop :=
  forall x, (exists i, (i < K)%nat /\ x i <> 0) -> 0 < quad L x.

(** The reverse-KL objective, up to constants.  For q = N(m, diag s) on ℝᴷ and the target
    N(μ⋆, Σ⋆), Λ⋆ = Σ⋆⁻¹,

      KL(q ‖ N(μ⋆, Σ⋆)) = 1/2 [ tr(Λ⋆ diag s) + (m − μ⋆)ᵀ Λ⋆ (m − μ⋆) − K
                                + ln det Σ⋆ − ln det diag s ],

    and tr(Λ⋆ diag s) = Σᵢ Λ⋆ᵢᵢ sᵢ, ln det diag s = Σᵢ ln sᵢ, ln det Σ⋆ = − ln det Λ⋆, so

      KL(q ‖ N(μ⋆, Σ⋆)) = J(m, s) − 1/2 (K + ln det Λ⋆),
      J(m, s)           = 1/2 [ Σᵢ Λ⋆ᵢᵢ sᵢ − Σᵢ ln sᵢ + (m − μ⋆)ᵀ Λ⋆ (m − μ⋆) ].

    The constant 1/2 (K + ln det Λ⋆) does not depend on q, so minimising the KL over (m, s)
    is minimising J.  (The minimum found below is J = 1/2 (K + Σᵢ ln Λ⋆ᵢᵢ), i.e. the minimal
    KL is 1/2 (Σᵢ ln Λ⋆ᵢᵢ − ln det Λ⋆), Hadamard's gap; that identity is not needed.) *)
Definition rkl_objective (L : nat -> nat -> R) (mus m s : nat -> R) : R :=
  / 2 * (vsum K (fun i => L i i * s i) - vsum K (fun i => ln (s i))
         + quad L (fun i => m i - mus i)).

(** The claimed minimiser's variances s⋆ᵢ = 1/Λ⋆ᵢᵢ. *)
Definition rkl_var (L : nat -> nat -> R) : nat -> R := fun i => / L i i.

Definition positive (s : nat -> R) : Prop := forall i, (i < K)%nat -> 0 < s i.

(** eᵢᵀ L eᵢ = Lᵢᵢ (eᵢ = [delta i]). *)
Lemma quad_unit : forall L i, (i < K)%nat -> quad L (delta i) = L i i.
Proof.
  intros L i Hi. unfold quad, dot, matvec.
  pose proof (vsum_delta_l K i (fun a => vsum K (fun b => L a b * delta i b)) Hi) as E.
  cbv beta in E. rewrite E.
  rewrite (vsum_ext K _ (fun b => delta i b * L i b)) by (intros; ring).
  apply vsum_delta_l; exact Hi.
Qed.

(** A positive definite matrix has a positive diagonal, so s⋆ is admissible. *)
Lemma pos_def_diag : forall L, pos_def L -> forall i, (i < K)%nat -> 0 < L i i.
Proof.
  intros L HL i Hi. rewrite <- quad_unit by exact Hi. apply HL.
  exists i. split; [exact Hi|]. unfold delta. rewrite Nat.eqb_refl. lra.
Qed.

Lemma rkl_var_positive : forall L, pos_def L -> positive (rkl_var L).
Proof.
  intros L HL i Hi. unfold rkl_var. apply Rinv_0_lt_compat, pos_def_diag; assumption.
Qed.

Lemma quad_zero : forall L x, (forall i, (i < K)%nat -> x i = 0) -> quad L x = 0.
Proof.
  intros L x H. unfold quad, dot.
  rewrite (vsum_ext K _ (fun _ => 0)); [apply vsum_zero|].
  intros i Hi. rewrite H by exact Hi. ring.
Qed.

Lemma quad_ext : forall L x y, (forall i, (i < K)%nat -> x i = y i) -> quad L x = quad L y.
Proof.
  intros L x y H. unfold quad, dot, matvec. apply vsum_ext. intros i Hi.
  rewrite H by exact Hi. f_equal. apply vsum_ext. intros j Hj. rewrite H by exact Hj.
  reflexivity.
Qed.

Lemma pos_def_quad_nonneg : forall L, pos_def L -> forall x, 0 <= quad L x.
Proof.
  intros L HL x. destruct (vec_zero_dec K x) as [H|H].
  - rewrite quad_zero by exact H. lra.
  - apply Rlt_le, HL, H.
Qed.

(** J only sees the entries 0 … K−1. *)
Lemma rkl_objective_ext : forall L mus m s m' s',
  (forall i, (i < K)%nat -> m i = m' i /\ s i = s' i) ->
  rkl_objective L mus m s = rkl_objective L mus m' s'.
Proof.
  intros L mus m s m' s' H. unfold rkl_objective.
  rewrite (vsum_ext K (fun i => L i i * s i) (fun i => L i i * s' i))
    by (intros i Hi; rewrite (proj2 (H i Hi)); reflexivity).
  rewrite (vsum_ext K (fun i => ln (s i)) (fun i => ln (s' i)))
    by (intros i Hi; rewrite (proj2 (H i Hi)); reflexivity).
  rewrite (quad_ext L (fun i => m i - mus i) (fun i => m' i - mus i))
    by (intros i Hi; rewrite (proj1 (H i Hi)); reflexivity).
  reflexivity.
Qed.

(** ** The excess over the candidate minimiser

    J(m, s) − J(μ⋆, s⋆) = 1/2 [ Σᵢ (Λ⋆ᵢᵢ sᵢ − 1 − ln(Λ⋆ᵢᵢ sᵢ)) + (m − μ⋆)ᵀ Λ⋆ (m − μ⋆) ]:
    ln(Λ⋆ᵢᵢ sᵢ) = ln Λ⋆ᵢᵢ + ln sᵢ and ln s⋆ᵢ = − ln Λ⋆ᵢᵢ. *)
Lemma rkl_objective_gap : forall L mus m s,
  (forall i, (i < K)%nat -> 0 < L i i) -> positive s ->
  rkl_objective L mus m s - rkl_objective L mus mus (rkl_var L)
  = / 2 * (vsum K (fun i => kl_gap (L i i * s i)) + quad L (fun i => m i - mus i)).
Proof.
  intros L mus m s HL Hs. unfold rkl_objective, rkl_var.
  rewrite (quad_zero L (fun i => mus i - mus i)) by (intros; ring).
  rewrite (vsum_ext K (fun i => kl_gap (L i i * s i))
             (fun i => (L i i * s i - ln (s i)) - (L i i * / L i i - ln (/ L i i)))).
  - rewrite !vsum_minus. ring.
  - intros i Hi. specialize (HL i Hi). specialize (Hs i Hi). unfold kl_gap.
    rewrite ln_mult, ln_Rinv by assumption. field. lra.
Qed.

(** ** The projection *)

(** (1) m = μ⋆, sᵢ = 1/Λ⋆ᵢᵢ minimises J (hence the KL) over all m and all s > 0. *)
Theorem rkl_projection_min : forall L mus, pos_def L ->
  forall m s, positive s -> rkl_objective L mus mus (rkl_var L) <= rkl_objective L mus m s.
Proof.
  intros L mus HL m s Hs.
  pose proof (pos_def_diag L HL) as Hd.
  pose proof (rkl_objective_gap L mus m s Hd Hs) as E.
  assert (0 <= vsum K (fun i => kl_gap (L i i * s i))).
  { apply vsum_nonneg. intros i Hi. apply kl_gap_nonneg.
    apply Rmult_lt_0_compat; [apply Hd|apply Hs]; exact Hi. }
  pose proof (pos_def_quad_nonneg L HL (fun i => m i - mus i)). lra.
Qed.

(** (2) ... and nothing else does: a pair (m, s) with the minimal value is (μ⋆, s⋆). *)
Theorem rkl_projection_unique : forall L mus, pos_def L ->
  forall m s, positive s -> rkl_objective L mus m s = rkl_objective L mus mus (rkl_var L) ->
  forall i, (i < K)%nat -> m i = mus i /\ s i = / L i i.
Proof.
  intros L mus HL m s Hs Heq.
  pose proof (pos_def_diag L HL) as Hd.
  pose proof (rkl_objective_gap L mus m s Hd Hs) as E.
  assert (Hg : forall i, (i < K)%nat -> 0 <= kl_gap (L i i * s i)).
  { intros i Hi. apply kl_gap_nonneg. apply Rmult_lt_0_compat; [apply Hd|apply Hs]; exact Hi. }
  pose proof (vsum_nonneg K _ Hg) as Hsum.
  pose proof (pos_def_quad_nonneg L HL (fun i => m i - mus i)) as Hq.
  assert (Hsum0 : vsum K (fun i => kl_gap (L i i * s i)) = 0) by lra.
  assert (Hq0 : quad L (fun i => m i - mus i) = 0) by lra.
  intros i Hi. split.
  - destruct (vec_zero_dec K (fun i => m i - mus i)) as [Hz|Hz].
    + specialize (Hz i Hi). cbv beta in Hz. lra.
    + specialize (HL _ Hz). lra.
  - pose proof (vsum_nonneg_zero K _ Hg Hsum0 i Hi) as H0.
    apply kl_gap_zero in H0; [|apply Rmult_lt_0_compat; [apply Hd|apply Hs]; exact Hi].
    specialize (Hd i Hi). apply (Rmult_eq_reg_l (L i i)); [|lra].
    rewrite H0. field. lra.
Qed.

(** Both together: (μ⋆, s⋆) is admissible and the unique minimiser. *)
Corollary rkl_projection : forall L mus, pos_def L ->
  positive (rkl_var L) /\
  (forall m s, positive s -> rkl_objective L mus mus (rkl_var L) <= rkl_objective L mus m s) /\
  (forall m s, positive s -> rkl_objective L mus m s = rkl_objective L mus mus (rkl_var L) ->
     forall i, (i < K)%nat -> m i = mus i /\ s i = rkl_var L i).
Proof.
  intros L mus HL. split; [apply rkl_var_positive; exact HL|]. split.
  - apply rkl_projection_min; exact HL.
  - intros m s Hs Heq i Hi. apply (rkl_projection_unique L mus HL m s Hs Heq i Hi).
Qed.

(** ** The one-step posterior of the diagonal KDN's prior *)

(** Λ⋆ = diag(1/p̂) + k kᵀ/r ([posterior_precision], Models.v) is positive definite:
    xᵀ Λ⋆ x = Σᵢ xᵢ²/p̂ᵢ + (kᵀx)²/r. *)
Lemma posterior_precision_quad : forall ph k r x,
  (forall i, (i < K)%nat -> 0 < ph i) -> 0 < r ->
  quad (posterior_precision ph k r) x
  = vsum K (fun i => x i * x i / ph i) + dot K k x * dot K k x / r.
Proof.
  intros ph k r x Hph Hr. unfold quad, dot, matvec, posterior_precision.
  rewrite (vsum_ext K _ (fun i => x i * x i / ph i
                                  + (k i * x i) * (vsum K (fun j => k j * x j) / r))).
  - rewrite vsum_plus, vsum_scal_r. field. lra.
  - intros i Hi.
    rewrite (vsum_ext K _ (fun j => delta i j * (x j / ph i) + k i / r * (k j * x j)))
      by (intros; field; split; [lra|apply Rgt_not_eq, Hph; exact Hi]).
    rewrite vsum_plus, vsum_scal_l, vsum_delta_l by exact Hi.
    field. split; [lra|apply Rgt_not_eq, Hph; exact Hi].
Qed.

Theorem posterior_precision_pos_def : forall ph k r,
  (forall i, (i < K)%nat -> 0 < ph i) -> 0 < r -> pos_def (posterior_precision ph k r).
Proof.
  intros ph k r Hph Hr x [i0 [Hi0 Hx]]. rewrite posterior_precision_quad by assumption.
  assert (0 < vsum K (fun i => x i * x i / ph i)).
  { apply (vsum_pos K _ i0); [|exact Hi0|].
    - intros i Hi. unfold Rdiv. apply Rmult_le_pos; [apply Rle_0_sqr|].
      apply Rlt_le, Rinv_0_lt_compat, Hph; exact Hi.
    - unfold Rdiv. apply Rmult_lt_0_compat; [apply Rsqr_pos_lt; exact Hx|].
      apply Rinv_0_lt_compat, Hph; exact Hi0. }
  assert (0 <= dot K k x * dot K k x / r).
  { unfold Rdiv. apply Rmult_le_pos; [apply Rle_0_sqr|apply Rlt_le, Rinv_0_lt_compat; lra]. }
  lra.
Qed.

(** Λ⋆ is the precision of the exact one-step posterior: it inverts the exact posterior
    covariance (I − κ kᵀ) diag(p̂) of §2 (κ the dense gain for the prior diag(p̂)), on both
    sides — Models.v's Sherman–Morrison with Y = diag(1/p̂), P = diag(p̂). *)
Definition posterior_covariance (ph k : nat -> R) (r : R) : nat -> nat -> R :=
  fun a b => (delta a b - kalman_gain K (diagm ph) k r a * k b) * ph b.

Theorem posterior_precision_inverse : forall ph k r,
  (forall i, (i < K)%nat -> 0 < ph i) -> 0 < r ->
  forall i j, (i < K)%nat -> (j < K)%nat ->
  matmul K (posterior_precision ph k r) (posterior_covariance ph k r) i j = delta i j /\
  matmul K (posterior_covariance ph k r) (posterior_precision ph k r) i j = delta i j.
Proof.
  intros ph k r Hph Hr i j Hi Hj.
  set (Y := fun a b => delta a b / ph a).
  set (P := diagm ph).
  set (sig := vsum K (fun l => ph l * (k l * k l))).
  assert (Hsig : 0 <= sig).
  { apply vsum_nonneg. intros l Hl. apply Rmult_le_pos; [apply Rlt_le, Hph; exact Hl|].
    apply Rle_0_sqr. }
  assert (Hu : forall a, (a < K)%nat -> vsum K (fun m => P a m * k m) = ph a * k a).
  { intros a Ha. unfold P, diagm.
    rewrite (vsum_ext K _ (fun m => delta a m * (ph m * k m))) by (intros; ring).
    apply vsum_delta_l; exact Ha. }
  assert (Hw : forall b, (b < K)%nat -> vsum K (fun m => k m * P m b) = k b * ph b).
  { intros b Hb. unfold P, diagm.
    rewrite (vsum_ext K _ (fun m => delta b m * (k m * ph b))).
    - apply vsum_delta_l; exact Hb.
    - intros m Hm. unfold delta. rewrite Nat.eqb_sym. ring. }
  assert (Hs : vsum K (fun l => k l * vsum K (fun m => P l m * k m)) + r = r + sig).
  { unfold sig. rewrite (vsum_ext K _ (fun l => ph l * (k l * k l))); [ring|].
    intros l Hl. rewrite Hu by exact Hl. ring. }
  assert (Hs0 : vsum K (fun l => k l * vsum K (fun m => P l m * k m)) + r <> 0)
    by (rewrite Hs; lra).
  (* P − u wᵀ / s is the posterior covariance, column by column. *)
  assert (HC : forall a b, (a < K)%nat -> (b < K)%nat ->
    P a b - vsum K (fun m => P a m * k m) * vsum K (fun m => k m * P m b)
            / (vsum K (fun l => k l * vsum K (fun m => P l m * k m)) + r)
    = posterior_covariance ph k r a b).
  { intros a b Ha Hb. rewrite Hu, Hw, Hs by assumption.
    unfold posterior_covariance. rewrite gain_diagonal by exact Ha.
    unfold P, diagm. fold sig. field. lra. }
  assert (HYP : forall a b, (a < K)%nat -> (b < K)%nat -> matmul K Y P a b = delta a b).
  { intros a b Ha Hb. unfold matmul, Y, P, diagm.
    rewrite (vsum_ext K _ (fun l => delta a l * (delta l b * ph b / ph a)))
      by (intros; field; apply Rgt_not_eq, Hph; exact Ha).
    rewrite vsum_delta_l by exact Ha. unfold delta.
    destruct (Nat.eqb_spec a b) as [->|]; [field; apply Rgt_not_eq, Hph; exact Hb|].
    unfold Rdiv. ring. }
  assert (HPY : forall a b, (a < K)%nat -> (b < K)%nat -> matmul K P Y a b = delta a b).
  { intros a b Ha Hb. unfold matmul, Y, P, diagm.
    rewrite (vsum_ext K _ (fun l => delta a l * (ph l * (delta l b / ph l)))) by (intros; ring).
    rewrite vsum_delta_l by exact Ha. field. apply Rgt_not_eq, Hph; exact Ha. }
  pose proof (sherman_morrison_rank_one K Y P k r HYP ltac:(lra) Hs0 i j Hi Hj) as R1.
  pose proof (sherman_morrison_rank_one_left K Y P k r HPY ltac:(lra) Hs0 i j Hi Hj) as R2.
  cbv zeta in R1, R2. split.
  - rewrite <- R1. unfold matmul. apply vsum_ext. intros l Hl.
    rewrite HC by assumption. reflexivity.
  - rewrite <- R2. unfold matmul. apply vsum_ext. intros l Hl.
    rewrite HC by assumption. reflexivity.
Qed.

(** (3) The diagonal KDN step is the reverse-KL projection of the exact one-step posterior.
    Prior N(diag(α) S, diag(p̂)), p̂ᵢ = αᵢ² pᵢ + ωᵢ, observation v = Sᵀk + noise(r I); column j
    of the memory is a K-vector whose exact posterior is N(μ⋆, Σ⋆), μ⋆ the exact Kalman mean
    update (§2, column j), Λ⋆ = Σ⋆⁻¹ = diag(1/p̂) + k kᵀ/r.  The unique minimiser of the
    reverse KL over N(m, diag s) is the diagonal KDN's column j (m = μ⋆: the mean is kept) and
    its covariance pᵢ' = p̂ᵢ/(1 + uᵢ p̂ᵢ), u = k²/r (μ = 1): sᵢ = 1/Λ⋆ᵢᵢ = pᵢ'. *)
Theorem diagonal_kdn_is_reverse_kl_projection :
  forall (alpha omega p k v : nat -> R) (r : R) (S : nat -> nat -> R) (j : nat),
  (forall i, (i < K)%nat -> 0 < diag_predict (alpha i) (omega i) (p i)) -> 0 < r ->
  let ph := fun i => diag_predict (alpha i) (omega i) (p i) in
  let Lam := posterior_precision ph k r in
  let mus := fun i => kalman_mean_update K alpha (kalman_gain K (diagm ph) k r) k v S i j in
  let m_kdn := fun i => two_key_update K alpha
                 (fun l => ph l * k l / (r + vsum K (fun m => ph m * (k m * k m)))) k v S i j in
  let p_kdn := fun i => diag_cov_step (alpha i) (omega i) (kdn_u (k i) r 1) (p i) in
  positive p_kdn /\
  (forall m s, positive s -> rkl_objective Lam mus m_kdn p_kdn <= rkl_objective Lam mus m s) /\
  (forall m s, positive s -> rkl_objective Lam mus m s = rkl_objective Lam mus m_kdn p_kdn ->
     forall i, (i < K)%nat -> m i = m_kdn i /\ s i = p_kdn i).
Proof.
  intros alpha omega p k v r S j Hph Hr ph Lam mus m_kdn p_kdn.
  assert (HL : pos_def Lam) by (apply posterior_precision_pos_def; assumption).
  (* the KDN's column is μ⋆ (Models.v: the one-step mean is exact) ... *)
  assert (Hm : forall i, (i < K)%nat -> m_kdn i = mus i).
  { intros i Hi. unfold m_kdn, mus. symmetry. apply diagonal_kdn_mean_exact; exact Hi. }
  (* ... and its pᵢ is 1/Λ⋆ᵢᵢ (Models.v: 1/pᵢ is the diagonal of the posterior precision) *)
  assert (Hp : forall i, (i < K)%nat -> p_kdn i = rkl_var Lam i).
  { intros i Hi. unfold rkl_var, Lam, p_kdn.
    rewrite (diagonal_kdn_precision_is_diagonal ph k r (alpha i) (omega i) (p i) i).
    - rewrite Rinv_inv. reflexivity.
    - reflexivity.
    - apply Hph; exact Hi.
    - exact Hr. }
  assert (Hopt : rkl_objective Lam mus m_kdn p_kdn = rkl_objective Lam mus mus (rkl_var Lam)).
  { apply rkl_objective_ext. intros i Hi. split; [apply Hm|apply Hp]; exact Hi. }
  destruct (rkl_projection Lam mus HL) as [Hpos [Hmin Huniq]].
  split; [|split].
  - intros i Hi. rewrite Hp by exact Hi. apply Hpos; exact Hi.
  - intros m s Hs. rewrite Hopt. apply Hmin; exact Hs.
  - intros m s Hs Heq i Hi. rewrite Hopt in Heq. rewrite Hm, Hp by exact Hi.
    apply (Huniq m s Hs Heq i Hi).
Qed.

End ReverseKL.
