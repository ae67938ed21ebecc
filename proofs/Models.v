(** * The models' steps and their leaves: docs/math.md §2–§8 (table of §8);
    reference/include/kalman_oracle/algebra/leaves.hpp and models/{kla,diagonal,isotropic,
    fixed_gain,delta_rule}.hpp.

    Vectors are functions [nat -> R] of a dimension K (entries 0 … K−1), matrices
    [nat -> nat -> R]; sums are [vsum]. *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import Mobius Affine Scan.
Import ListNotations.
Open Scope R_scope.

(** ** Finite sums *)

Fixpoint vsum (n : nat) (f : nat -> R) : R :=
  match n with
  | O => 0
  | S m => vsum m f + f m
  end.

Lemma vsum_ext : forall n f g, (forall i, (i < n)%nat -> f i = g i) -> vsum n f = vsum n g.
Proof.
  induction n as [|n IH]; intros f g H; simpl; [reflexivity|].
  rewrite (IH f g) by (intros; apply H; lia). rewrite H by lia. reflexivity.
Qed.

Lemma vsum_plus : forall n f g, vsum n (fun i => f i + g i) = vsum n f + vsum n g.
Proof. induction n as [|n IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma vsum_scal_l : forall n c f, vsum n (fun i => c * f i) = c * vsum n f.
Proof. induction n as [|n IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma vsum_scal_r : forall n c f, vsum n (fun i => f i * c) = vsum n f * c.
Proof. induction n as [|n IH]; intros; simpl; [ring|rewrite IH; ring]. Qed.

Lemma vsum_zero : forall n, vsum n (fun _ => 0) = 0.
Proof. induction n as [|n IH]; simpl; [reflexivity|rewrite IH; ring]. Qed.

(** Kronecker delta. *)
Definition delta (i j : nat) : R := if Nat.eqb i j then 1 else 0.

Lemma vsum_delta_l : forall n i f, (i < n)%nat -> vsum n (fun j => delta i j * f j) = f i.
Proof.
  induction n as [|n IH]; intros i f Hi; [lia|]. simpl.
  destruct (Nat.eq_dec i n) as [->|Hne].
  - rewrite (vsum_ext n _ (fun _ => 0)).
    + rewrite vsum_zero. unfold delta. rewrite Nat.eqb_refl. ring.
    + intros j Hj. unfold delta. destruct (Nat.eqb_spec n j); [lia|ring].
  - rewrite IH by lia. unfold delta. destruct (Nat.eqb_spec i n); [lia|ring].
Qed.

Lemma vsum_swap : forall n m (f : nat -> nat -> R),
  vsum n (fun i => vsum m (fun j => f i j)) = vsum m (fun j => vsum n (fun i => f i j)).
Proof.
  induction n as [|n IH]; intros m f; simpl.
  - symmetry; apply vsum_zero.
  - rewrite IH, <- vsum_plus. reflexivity.
Qed.

(** ** Möbius and affine maps are monoids: every scan theorem of Scan.v applies to them. *)

Definition mobius_prod := prod mob compose identity.

Corollary mobius_schedules_eq_fold : forall xs : list mob,
  hillis_steele mob compose identity xs = seq_inclusive mob compose xs /\
  sklansky mob compose identity xs = seq_inclusive mob compose xs /\
  brent_kung mob compose identity xs = seq_inclusive mob compose xs /\
  blelloch_inclusive mob compose identity xs = seq_inclusive mob compose xs /\
  blelloch_exclusive mob compose identity xs = seq_exclusive mob compose identity xs /\
  (forall c, (1 <= c)%nat -> chunked mob compose identity c xs = seq_inclusive mob compose xs).
Proof.
  pose proof compose_assoc as Ha. pose proof compose_identity_l as Hl.
  pose proof compose_identity_r as Hr.
  intros xs; repeat split.
  - apply hillis_steele_eq_fold; assumption.
  - apply sklansky_eq_fold; assumption.
  - apply brent_kung_eq_fold; assumption.
  - apply blelloch_inclusive_eq_fold; assumption.
  - apply blelloch_exclusive_eq_fold; assumption.
  - intros; apply chunked_eq_fold; assumption.
Qed.

Corollary affine_schedules_eq_fold : forall xs : list affine,
  hillis_steele affine acompose aidentity xs = seq_inclusive affine acompose xs /\
  sklansky affine acompose aidentity xs = seq_inclusive affine acompose xs /\
  brent_kung affine acompose aidentity xs = seq_inclusive affine acompose xs /\
  blelloch_inclusive affine acompose aidentity xs = seq_inclusive affine acompose xs /\
  blelloch_exclusive affine acompose aidentity xs = seq_exclusive affine acompose aidentity xs /\
  (forall c, (1 <= c)%nat -> chunked affine acompose aidentity c xs = seq_inclusive affine acompose xs).
Proof.
  pose proof acompose_assoc as Ha. pose proof acompose_identity_l as Hl.
  pose proof acompose_identity_r as Hr.
  intros xs; repeat split.
  - apply hillis_steele_eq_fold; assumption.
  - apply sklansky_eq_fold; assumption.
  - apply brent_kung_eq_fold; assumption.
  - apply blelloch_inclusive_eq_fold; assumption.
  - apply blelloch_exclusive_eq_fold; assumption.
  - intros; apply chunked_eq_fold; assumption.
Qed.

(** An affine map is the Möbius map [[α, ρ], [0, 1]]; the embedding respects composition. *)
Definition affine_as_mobius (m : affine) : mob := Mobius (alpha m) (rho m) 0 1.

Theorem affine_as_mobius_compose : forall l e,
  affine_as_mobius (acompose l e) = compose (affine_as_mobius l) (affine_as_mobius e).
Proof. intros [] []; apply mobius_ext; simpl; ring. Qed.

Theorem affine_as_mobius_apply : forall m x, apply (affine_as_mobius m) x = aapply m x.
Proof. intros [] x; unfold apply, aapply; simpl; field. Qed.

(** ** Products of leaves reproduce the recursion *)

(** x_t = M_t · x_{t−1}, the trajectory [x_1; …; x_T]. *)
Fixpoint trajectory (ms : list mob) (x : R) : list R :=
  match ms with
  | [] => []
  | m :: r => let y := apply m x in y :: trajectory r y
  end.

Lemma trajectory_scan_from : forall ms a x0, Forall posmap ms -> posmap a -> 0 < x0 ->
  map (fun P => apply P x0) (scan_from mob compose a ms) = trajectory ms (apply a x0).
Proof.
  induction ms as [|m r IH]; intros a x0 Hms Ha Hx; [reflexivity|].
  inversion Hms as [|? ? Hm Hr]; subst. simpl.
  rewrite IH; [|assumption|apply posmap_compose; assumption|assumption].
  rewrite apply_compose by assumption. reflexivity.
Qed.

(** Every inclusive prefix product Π_t = M_t ⋯ M_1 (computed by any schedule, Scan.v) maps
    x₀ to x_t. *)
Theorem prefix_products_act : forall ms x0, Forall posmap ms -> 0 < x0 ->
  map (fun P => apply P x0) (inclusive_spec mob compose identity ms) = trajectory ms x0.
Proof.
  intros ms x0 Hms Hx.
  rewrite <- (scan_from_e mob compose identity compose_assoc compose_identity_l
                compose_identity_r).
  rewrite trajectory_scan_from by (apply posmap_identity || assumption).
  rewrite apply_identity. reflexivity.
Qed.

(** ** KLA (§6; models/kla.hpp) *)

(** [kla_observe]: φ = Λ k², ρ = v Λ k. *)
Definition kla_phi (Lam k : R) : R := Lam * k * k.
Definition kla_rho (Lam k v : R) : R := v * Lam * k.

(** One token of one element, as kla.hpp: den = ā² + p̄ λ, λ' = λ/den + φ, α = ā/den,
    η' = α η + ρ. *)
Definition kla_den (abar pbar lam : R) : R := abar * abar + pbar * lam.
Definition kla_lambda_step (abar pbar phi lam : R) : R := lam / kla_den abar pbar lam + phi.
Definition kla_eta_step (abar pbar rho lam eta : R) : R := abar / kla_den abar pbar lam * eta + rho.

(** [kla_precision_leaf]: [[1 + p̄φ, ā²φ], [p̄, ā²]]. *)
Definition kla_precision_leaf (abar pbar phi : R) : mob :=
  Mobius (1 + pbar * phi) (abar * abar * phi) pbar (abar * abar).

(** [kla_mean_leaf]: (ā / (ā² + p̄ λ_{t−1}), ρ). *)
Definition kla_mean_leaf (abar pbar lam_prev rho : R) : affine :=
  Affine (abar / (abar * abar + pbar * lam_prev)) rho.

Lemma kla_den_pos : forall abar pbar lam, 0 < abar -> 0 <= pbar -> 0 < lam ->
  0 < kla_den abar pbar lam.
Proof.
  intros; unfold kla_den.
  apply pos_plus_l; [apply Rmult_lt_0_compat|apply Rmult_le_pos]; lra.
Qed.

(** The KLA precision step is the action of its leaf. *)
Theorem kla_precision_leaf_step : forall abar pbar phi lam,
  0 < lam -> 0 < abar -> 0 <= pbar ->
  kla_lambda_step abar pbar phi lam = apply (kla_precision_leaf abar pbar phi) lam.
Proof.
  intros abar pbar phi lam Hl Ha Hp.
  pose proof (kla_den_pos abar pbar lam Ha Hp Hl) as Hd.
  unfold kla_lambda_step, apply, kla_precision_leaf, kla_den in *; simpl.
  replace (pbar * lam + abar * abar) with (abar * abar + pbar * lam) by ring.
  field. lra.
Qed.

(** The η step is affine: the action of [kla_mean_leaf] built from λ_{t−1}. *)
Theorem kla_eta_step_affine : forall abar pbar rho lam eta,
  kla_eta_step abar pbar rho lam eta = aapply (kla_mean_leaf abar pbar lam rho) eta.
Proof. intros; reflexivity. Qed.

Theorem kla_leaf_det : forall abar pbar phi,
  det (kla_precision_leaf abar pbar phi) = abar * abar.
Proof. intros; unfold det, gdet, kla_precision_leaf; simpl; ring. Qed.

Theorem kla_leaf_posmap : forall abar pbar phi, 0 < abar -> 0 <= pbar -> 0 <= phi ->
  posmap (kla_precision_leaf abar pbar phi).
Proof.
  intros abar pbar phi Ha Hp Hf. unfold posmap, nonneg, kla_precision_leaf; simpl.
  assert (0 < abar * abar) by (apply Rmult_lt_0_compat; lra).
  assert (0 <= pbar * phi) by (apply Rmult_le_pos; lra).
  assert (0 <= abar * abar * phi) by (apply Rmult_le_pos; lra).
  repeat split; lra.
Qed.

(** T tokens of one KLA element: the sequential λ recursion of kla.hpp. *)
Fixpoint kla_lambdas (toks : list (R * R * R)) (lam : R) : list R :=
  match toks with
  | [] => []
  | (abar, pbar, phi) :: r => let l := kla_lambda_step abar pbar phi lam in l :: kla_lambdas r l
  end.

Definition kla_token_ok (tok : R * R * R) : Prop :=
  let '(abar, pbar, phi) := tok in 0 < abar /\ 0 <= pbar /\ 0 <= phi.

Definition kla_leaf_of (tok : R * R * R) : mob :=
  let '(abar, pbar, phi) := tok in kla_precision_leaf abar pbar phi.

(** The scan form of kla_parallel.hpp: with any schedule that computes the inclusive
    prefixes (Scan.v: all of them), λ_t = Π_t · λ₀ for every t. *)
Theorem kla_scan_lambdas : forall (schedule : list mob -> list mob),
  (forall xs, schedule xs = inclusive_spec mob compose identity xs) ->
  forall toks lam0, 0 < lam0 -> Forall kla_token_ok toks ->
  map (fun P => apply P lam0) (schedule (map kla_leaf_of toks)) = kla_lambdas toks lam0.
Proof.
  intros schedule Hs toks lam0 Hl Ht. rewrite Hs, prefix_products_act; [| |exact Hl].
  - clear Hs. revert lam0 Hl. induction Ht as [|[[a p] f] r [Ha [Hp Hf]] Hr IH]; intros lam0 Hl;
      [reflexivity|].
    simpl. rewrite <- kla_precision_leaf_step by assumption. f_equal. apply IH.
    unfold kla_lambda_step. apply pos_plus_l; [|exact Hf].
    apply Rdiv_lt_0_compat; [exact Hl|apply kla_den_pos; assumption].
  - apply Forall_map. eapply Forall_impl; [|exact Ht].
    intros [[a p] f] [Ha [Hp Hf]]. apply kla_leaf_posmap; assumption.
Qed.

(** λ is the information filter: λ' = 1/(ā²/λ + p̄) + φ (predicted variance ā²/λ + p̄). *)
Theorem kla_lambda_information : forall abar pbar phi lam,
  0 < lam -> 0 < abar -> 0 <= pbar ->
  kla_lambda_step abar pbar phi lam = / (abar * abar / lam + pbar) + phi.
Proof.
  intros abar pbar phi lam Hl Ha Hp.
  pose proof (kla_den_pos abar pbar lam Ha Hp Hl) as Hd.
  unfold kla_lambda_step, kla_den in *. f_equal.
  field. split; [|lra].
  replace (abar * abar + pbar * lam) with ((abar * abar / lam + pbar) * lam) in Hd
    by (field; lra).
  intro H0; rewrite H0 in Hd; lra.
Qed.

(** 1/λ and η/λ are the moment-form scalar Kalman filter of v = k x + noise(1/Λ),
    x' = ā x + noise(p̄): variance P = 1/λ, mean x̂ = η/λ. *)
Theorem kla_is_moment_filter : forall abar pbar Lam k v lam eta,
  0 < lam -> 0 < abar -> 0 <= pbar -> 0 < Lam ->
  let P := / lam in
  let xh := eta / lam in
  let Pp := abar * abar * P + pbar in            (* predicted variance *)
  let s := k * k * Pp + / Lam in                  (* innovation variance *)
  let kappa := Pp * k / s in                      (* gain *)
  let lam' := kla_lambda_step abar pbar (kla_phi Lam k) lam in
  let eta' := kla_eta_step abar pbar (kla_rho Lam k v) lam eta in
  / lam' = Pp - kappa * k * Pp /\
  eta' / lam' = abar * xh + kappa * (v - k * (abar * xh)).
Proof.
  intros abar pbar Lam k v lam eta Hl Ha Hp HL P xh Pp s kappa lam' eta'.
  pose proof (kla_den_pos abar pbar lam Ha Hp Hl) as Hd.
  assert (HPp : 0 < Pp).
  { unfold Pp, P. apply pos_plus_l; [|lra].
    apply Rmult_lt_0_compat; [apply Rmult_lt_0_compat; lra|apply Rinv_0_lt_compat; lra]. }
  assert (Hs : 0 < s).
  { unfold s. apply pos_plus_r; [|apply Rinv_0_lt_compat; lra].
    apply Rmult_le_pos; [apply Rle_0_sqr|lra]. }
  assert (Hlam' : 0 < lam').
  { unfold lam', kla_lambda_step, kla_phi. apply pos_plus_l.
    - apply Rdiv_lt_0_compat; assumption.
    - replace (Lam * k * k) with (Lam * (k * k)) by ring.
      apply Rmult_le_pos; [lra|apply Rle_0_sqr]. }
  assert (Hden : kla_den abar pbar lam = Pp * lam).
  { unfold kla_den, Pp, P. field. lra. }
  assert (Hlam'e : lam' = (1 + Pp * Lam * k * k) / Pp).
  { unfold lam', kla_lambda_step, kla_phi. rewrite Hden. field. split; lra. }
  assert (Hse : s = (1 + Pp * Lam * k * k) / Lam).
  { unfold s. field. lra. }
  assert (H1 : 0 < 1 + Pp * Lam * k * k).
  { replace (1 + Pp * Lam * k * k) with (1 + Pp * Lam * (k * k)) by ring.
    apply pos_plus_l; [lra|]. apply Rmult_le_pos; [apply Rmult_le_pos; lra|apply Rle_0_sqr]. }
  split.
  - rewrite Hlam'e. unfold kappa. rewrite Hse. field. repeat split; lra.
  - rewrite Hlam'e. unfold eta', kla_eta_step, kla_rho, kappa, xh. rewrite Hse, Hden.
    field. repeat split; lra.
Qed.

(** ** Diagonal KDN (§4; models/diagonal.hpp), one key channel *)

(** [diag_kdn_information]: u = μ k² / r. *)
Definition kdn_u (k r mu : R) : R := mu * k * k / r.

(** p̂ = α² p + ω;  p' = p̂ / (1 + u p̂). *)
Definition diag_predict (alpha omega p : R) : R := alpha * alpha * p + omega.
Definition diag_cov_step (alpha omega u p : R) : R :=
  diag_predict alpha omega p / (1 + u * diag_predict alpha omega p).

(** [diag_kdn_covariance_leaf]: [[α², ω], [uα², 1 + uω]]. *)
Definition diag_cov_leaf (alpha omega u : R) : mob :=
  Mobius (alpha * alpha) omega (u * (alpha * alpha)) (1 + u * omega).

(** [diag_kdn_precision_leaf]: [[1 + uω, uα²], [ω, α²]]. *)
Definition diag_prec_leaf (alpha omega u : R) : mob :=
  Mobius (1 + u * omega) (u * (alpha * alpha)) omega (alpha * alpha).

Lemma diag_predict_nonneg : forall alpha omega p, 0 <= omega -> 0 <= p ->
  0 <= diag_predict alpha omega p.
Proof.
  intros; unfold diag_predict.
  apply Rplus_le_le_0_compat; [apply Rmult_le_pos; [apply Rle_0_sqr|]|]; assumption.
Qed.

Theorem diag_cov_leaf_step : forall alpha omega u p, 0 <= omega -> 0 <= u -> 0 <= p ->
  diag_cov_step alpha omega u p = apply (diag_cov_leaf alpha omega u) p.
Proof.
  intros alpha omega u p Hw Hu Hp.
  pose proof (diag_predict_nonneg alpha omega p Hw Hp) as Hph.
  assert (0 <= u * diag_predict alpha omega p) by (apply Rmult_le_pos; assumption).
  unfold diag_cov_step, apply, diag_cov_leaf in *; simpl.
  replace (u * (alpha * alpha) * p + (1 + u * omega))
    with (1 + u * diag_predict alpha omega p) by (unfold diag_predict; ring).
  unfold diag_predict. field.
  replace (1 + u * (alpha * alpha * p + omega)) with (1 + u * diag_predict alpha omega p)
    by (unfold diag_predict; ring). lra.
Qed.

(** The precision leaf is the same map on 1/p. *)
Theorem diag_prec_leaf_step : forall alpha omega u p, 0 <= omega -> 0 <= u -> 0 < p ->
  0 < diag_predict alpha omega p ->
  / diag_cov_step alpha omega u p = apply (diag_prec_leaf alpha omega u) (/ p).
Proof.
  intros alpha omega u p Hw Hu Hp Hph.
  assert (0 <= u * diag_predict alpha omega p) by (apply Rmult_le_pos; lra).
  unfold diag_cov_step, apply, diag_prec_leaf in *; simpl.
  replace (omega * / p + alpha * alpha) with (diag_predict alpha omega p / p)
    by (unfold diag_predict; field; lra).
  replace ((1 + u * omega) * / p + u * (alpha * alpha))
    with ((1 + u * diag_predict alpha omega p) / p) by (unfold diag_predict; field; lra).
  field. repeat split; lra.
Qed.

(** 1/p' = 1/p̂ + u: the precision update. *)
Theorem diag_cov_step_information : forall alpha omega u p,
  0 < diag_predict alpha omega p -> 0 <= u ->
  / diag_cov_step alpha omega u p = / diag_predict alpha omega p + u.
Proof.
  intros alpha omega u p Hph Hu.
  assert (0 <= u * diag_predict alpha omega p) by (apply Rmult_le_pos; lra).
  unfold diag_cov_step. field. split; lra.
Qed.

Theorem diag_cov_leaf_det : forall alpha omega u,
  det (diag_cov_leaf alpha omega u) = alpha * alpha.
Proof. intros; unfold det, gdet, diag_cov_leaf; simpl; ring. Qed.

Theorem diag_prec_leaf_det : forall alpha omega u,
  det (diag_prec_leaf alpha omega u) = alpha * alpha.
Proof. intros; unfold det, gdet, diag_prec_leaf; simpl; ring. Qed.

Theorem diag_cov_leaf_posmap : forall alpha omega u, alpha <> 0 -> 0 <= omega -> 0 <= u ->
  posmap (diag_cov_leaf alpha omega u).
Proof.
  intros alpha omega u Ha Hw Hu. unfold posmap, nonneg, diag_cov_leaf; simpl.
  assert (0 < alpha * alpha) by (apply Rsqr_pos_lt; exact Ha).
  assert (0 <= u * omega) by (apply Rmult_le_pos; lra).
  assert (0 <= u * (alpha * alpha)) by (apply Rmult_le_pos; lra).
  repeat split; lra.
Qed.

(** ** Isotropic KDN (§5; models/isotropic.hpp) *)

(** [iso_kdn_decay]: a = mean αᵢ²;  [iso_kdn_information]: u = μ ‖k‖² / (K r). *)
Definition norm2 (K : nat) (k : nat -> R) : R := vsum K (fun i => k i * k i).
Definition iso_decay (K : nat) (alpha : nat -> R) : R := norm2 K alpha / INR K.
Definition iso_u (K : nat) (k : nat -> R) (r mu : R) : R := mu * norm2 K k / (INR K * r).

(** b̂ = a b + ω;  b' = b̂ / (1 + u b̂). *)
Definition iso_cov_step (a omega u b : R) : R := (a * b + omega) / (1 + u * (a * b + omega)).

(** [iso_kdn_covariance_leaf]: [[a, ω], [u a, 1 + u ω]]. *)
Definition iso_cov_leaf (a omega u : R) : mob := Mobius a omega (u * a) (1 + u * omega).

Theorem iso_cov_leaf_step : forall a omega u b, 0 <= a -> 0 <= omega -> 0 <= u -> 0 <= b ->
  iso_cov_step a omega u b = apply (iso_cov_leaf a omega u) b.
Proof.
  intros a omega u b Ha Hw Hu Hb.
  assert (0 <= u * (a * b + omega))
    by (apply Rmult_le_pos; [|apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]]; lra).
  unfold iso_cov_step, apply, iso_cov_leaf; simpl.
  replace (u * a * b + (1 + u * omega)) with (1 + u * (a * b + omega)) by ring.
  reflexivity.
Qed.

(** The isotropic leaf is the diagonal leaf with α² replaced by the trace projection a. *)
Theorem iso_leaf_is_diag_leaf : forall alpha omega u,
  iso_cov_leaf (alpha * alpha) omega u = diag_cov_leaf alpha omega u.
Proof. reflexivity. Qed.

Theorem iso_cov_leaf_posmap : forall a omega u, 0 < a -> 0 <= omega -> 0 <= u ->
  posmap (iso_cov_leaf a omega u).
Proof.
  intros a omega u Ha Hw Hu. unfold posmap, nonneg, iso_cov_leaf; simpl.
  assert (0 <= u * omega) by (apply Rmult_le_pos; lra).
  assert (0 <= u * a) by (apply Rmult_le_pos; lra).
  repeat split; lra.
Qed.

(** ** Gains (§2, §4, §5, §7) *)

Section Gains.
Variable K : nat.

Definition matvec (P : nat -> nat -> R) (k : nat -> R) : nat -> R :=
  fun i => vsum K (fun j => P i j * k j).
Definition dot (a b : nat -> R) : R := vsum K (fun i => a i * b i).

(** The dense Kalman gain κ = P̂ k / (kᵀ P̂ k + r) (§2). *)
Definition kalman_gain (P : nat -> nat -> R) (k : nat -> R) (r : R) : nat -> R :=
  fun i => matvec P k i / (dot k (matvec P k) + r).

Definition diagm (p : nat -> R) : nat -> nat -> R := fun i j => delta i j * p j.

(** For a diagonal prior diag(p̂) the dense gain is §4's κᵢ = p̂ᵢ kᵢ / (r + Σ p̂ⱼ kⱼ²). *)
Theorem gain_diagonal : forall p k r i, (i < K)%nat ->
  kalman_gain (diagm p) k r i = p i * k i / (r + vsum K (fun j => p j * (k j * k j))).
Proof.
  intros p k r i Hi. unfold kalman_gain, matvec, dot, diagm.
  assert (Hmv : forall l, (l < K)%nat -> vsum K (fun j => delta l j * p j * k j) = p l * k l).
  { intros l Hl. rewrite (vsum_ext K _ (fun j => delta l j * (p j * k j)))
      by (intros; ring). apply vsum_delta_l; exact Hl. }
  rewrite Hmv by exact Hi.
  rewrite (vsum_ext K (fun i0 => k i0 * vsum K (fun j => delta i0 j * p j * k j))
                      (fun j => p j * (k j * k j))).
  - f_equal; ring.
  - intros l Hl. rewrite Hmv by exact Hl. ring.
Qed.

(** P̂ = b̂ I gives κ = β k with β = b̂ / (r + b̂ ‖k‖²) (§5). *)
Definition iso_beta (bh r : R) (k : nat -> R) : R := bh / (r + bh * norm2 K k).

Theorem gain_isotropic : forall bh k r i, (i < K)%nat ->
  kalman_gain (diagm (fun _ => bh)) k r i = iso_beta bh r k * k i.
Proof.
  intros bh k r i Hi. rewrite gain_diagonal by exact Hi. unfold iso_beta, norm2.
  rewrite vsum_scal_l. unfold Rdiv. ring.
Qed.

(** The memory updates of §2 and §7 on S (K × V; rows l, columns j). *)
Definition decayed (alpha : nat -> R) (S : nat -> nat -> R) : nat -> nat -> R :=
  fun l j => alpha l * S l j.

(** Kalman (dense) form: Ŝ + κ (v − Ŝᵀ k)ᵀ with Ŝ = diag(α) S. *)
Definition kalman_mean_update (alpha kappa k v : nat -> R) (S : nat -> nat -> R) :=
  fun i j => decayed alpha S i j
             + kappa i * (v j - vsum K (fun l => decayed alpha S l j * k l)).

(** The two-key delta rule: (I − κ kᵀ) diag(α) S + κ vᵀ (delta_rule.hpp, given gain). *)
Definition two_key_update (alpha kappa k v : nat -> R) (S : nat -> nat -> R) :=
  fun i j => vsum K (fun l => (delta i l - kappa i * k l) * (alpha l * S l j)) + kappa i * v j.

(** KDA: (I − β k kᵀ) diag(α) S + β k vᵀ (§7, α = e^g per channel). *)
Definition kda_update (beta : R) (alpha k v : nat -> R) (S : nat -> nat -> R) :=
  fun i j => vsum K (fun l => (delta i l - beta * k i * k l) * (alpha l * S l j))
             + beta * k i * v j.

(** GDN: (I − β k kᵀ) γ S + β k vᵀ (γ = e^g scalar);  DeltaNet: γ = 1. *)
Definition gdn_update (beta gamma : R) (k v : nat -> R) (S : nat -> nat -> R) :=
  fun i j => vsum K (fun l => (delta i l - beta * k i * k l) * (gamma * S l j))
             + beta * k i * v j.
Definition deltanet_update (beta : R) (k v : nat -> R) (S : nat -> nat -> R) :=
  fun i j => vsum K (fun l => (delta i l - beta * k i * k l) * S l j) + beta * k i * v j.

(** The Kalman mean update is the two-key rule, whatever the gain. *)
Theorem kalman_mean_is_two_key : forall alpha kappa k v S i j, (i < K)%nat ->
  kalman_mean_update alpha kappa k v S i j = two_key_update alpha kappa k v S i j.
Proof.
  intros alpha kappa k v S i j Hi. unfold kalman_mean_update, two_key_update, decayed.
  rewrite (vsum_ext K (fun l => (delta i l - kappa i * k l) * (alpha l * S l j))
                      (fun l => delta i l * (alpha l * S l j)
                                + (- kappa i) * (alpha l * S l j * k l)))
    by (intros; ring).
  rewrite vsum_plus, vsum_scal_l, vsum_delta_l by exact Hi. ring.
Qed.

(** With κ = β k the two-key rule is KDA; KDA with α = γ is GDN, with γ = 1 DeltaNet. *)
Theorem two_key_beta_is_kda : forall beta alpha k v S i j,
  two_key_update alpha (fun l => beta * k l) k v S i j = kda_update beta alpha k v S i j.
Proof. intros; reflexivity. Qed.

Theorem kda_constant_is_gdn : forall beta gamma k v S i j,
  kda_update beta (fun _ => gamma) k v S i j = gdn_update beta gamma k v S i j.
Proof. intros; reflexivity. Qed.

Theorem gdn_one_is_deltanet : forall beta k v S i j,
  gdn_update beta 1 k v S i j = deltanet_update beta k v S i j.
Proof.
  intros; unfold gdn_update, deltanet_update. f_equal.
  apply vsum_ext; intros; ring.
Qed.

(** The isotropic KDN's memory step (the exact Kalman mean update for the prior b̂ I) is
    KDA fed β = b̂ / (r + b̂ ‖k‖²) (property [models_cross]: isotropic KDN = KDA with its β). *)
Theorem isotropic_kdn_is_kda : forall bh r alpha k v S i j, (i < K)%nat ->
  kalman_mean_update alpha (kalman_gain (diagm (fun _ => bh)) k r) k v S i j
  = kda_update (iso_beta bh r k) alpha k v S i j.
Proof.
  intros bh r alpha k v S i j Hi.
  rewrite kalman_mean_is_two_key by exact Hi. unfold two_key_update, kda_update.
  rewrite gain_isotropic by exact Hi. reflexivity.
Qed.

(** The diagonal KDN's memory step is the exact Kalman mean update for the prior
    N(diag(α) S, diag(p̂)) (it keeps the one-step mean; §4, KDN Prop. 2). *)
Theorem diagonal_kdn_mean_exact : forall ph r alpha k v S i j, (i < K)%nat ->
  kalman_mean_update alpha (kalman_gain (diagm ph) k r) k v S i j
  = two_key_update alpha
      (fun l => ph l * k l / (r + vsum K (fun m => ph m * (k m * k m)))) k v S i j.
Proof.
  intros ph r alpha k v S i j Hi.
  rewrite kalman_mean_is_two_key by exact Hi. unfold two_key_update.
  rewrite gain_diagonal by exact Hi. reflexivity.
Qed.

(** The diagonal of the exact posterior precision diag(1/p̂) + k kᵀ/r is 1/p̂ᵢ + kᵢ²/r, which
    is the diagonal KDN's 1/pᵢ for μ = 1 ([diag_cov_step_information] with u = k²/r). *)
Definition posterior_precision (ph k : nat -> R) (r : R) : nat -> nat -> R :=
  fun i j => delta i j / ph i + k i * k j / r.

Theorem diagonal_kdn_precision_is_diagonal : forall ph k r alpha omega p i,
  ph i = diag_predict alpha omega p -> 0 < ph i -> 0 < r ->
  posterior_precision ph k r i i = / diag_cov_step alpha omega (kdn_u (k i) r 1) p.
Proof.
  intros ph k r alpha omega p i Hph Hpos Hr.
  rewrite diag_cov_step_information.
  - unfold posterior_precision, delta, kdn_u. rewrite Nat.eqb_refl, Hph. field.
    split; lra.
  - lra.
  - unfold kdn_u. replace (1 * k i * k i / r) with ((k i * k i) / r) by (field; lra).
    unfold Rdiv; apply Rmult_le_pos; [apply Rle_0_sqr|apply Rlt_le, Rinv_0_lt_compat; lra].
Qed.

End Gains.

(** ** μ enters only after the gain (§4, §5) *)

(** One diagonal KDN step on one key channel: returns the gain coefficient's covariance
    (the p̂ the gain is formed from) and the next p.  The gain at this token uses p̂, formed
    before the write, so it does not depend on μ; μ reaches only later gains, through p. *)
Definition diag_step (mu alpha omega k r p : R) : R * R :=
  let ph := diag_predict alpha omega p in (ph, diag_cov_step alpha omega (kdn_u k r mu) p).

Theorem diag_gain_independent_of_mu : forall mu1 mu2 alpha omega k r p,
  fst (diag_step mu1 alpha omega k r p) = fst (diag_step mu2 alpha omega k r p).
Proof. reflexivity. Qed.

(** ** Information form = moment form (§3), scalar and rank one *)

Theorem scalar_information_is_moment : forall ph k r, 0 < ph -> 0 < r ->
  / (/ ph + k * k / r) = ph - ph * ph * (k * k) / (ph * (k * k) + r).
Proof.
  intros ph k r Hp Hr.
  assert (0 <= k * k) by apply Rle_0_sqr.
  assert (0 < ph * (k * k) + r) by (apply pos_plus_r; [apply Rmult_le_pos|]; lra).
  assert (/ ph + k * k / r = (ph * (k * k) + r) / (ph * r)) by (field; lra).
  rewrite H1. field. repeat split; lra.
Qed.

(** The diagonal KDN's covariance update with μ = 1 is the moment (Joseph-free) update. *)
Theorem diag_cov_step_moment : forall alpha omega k r p,
  0 < diag_predict alpha omega p -> 0 < r ->
  diag_cov_step alpha omega (kdn_u k r 1) p
  = diag_predict alpha omega p
    - diag_predict alpha omega p * diag_predict alpha omega p * (k * k)
      / (diag_predict alpha omega p * (k * k) + r).
Proof.
  intros alpha omega k r p Hph Hr.
  replace (kdn_u k r 1) with (k * k / r) by (unfold kdn_u; field; lra).
  rewrite <- scalar_information_is_moment by assumption.
  rewrite <- diag_cov_step_information.
  - rewrite Rinv_inv. reflexivity.
  - exact Hph.
  - unfold Rdiv; apply Rmult_le_pos; [apply Rle_0_sqr|apply Rlt_le, Rinv_0_lt_compat; lra].
Qed.

Section ShermanMorrison.
Variable K : nat.

Definition matmul (X Z : nat -> nat -> R) : nat -> nat -> R :=
  fun i j => vsum K (fun l => X i l * Z l j).

(** Rank-one information update (Y + k kᵀ/r)⁻¹ = P − (P k)(kᵀ P) / (kᵀ P k + r), P = Y⁻¹:
    the right inverse, entrywise (i, j < K). *)
Theorem sherman_morrison_rank_one : forall (Y P : nat -> nat -> R) (k : nat -> R) (r : R),
  (forall i j, (i < K)%nat -> (j < K)%nat -> matmul Y P i j = delta i j) ->
  r <> 0 ->
  vsum K (fun l => k l * vsum K (fun m => P l m * k m)) + r <> 0 ->
  let u := fun l => vsum K (fun m => P l m * k m) in
  let w := fun j => vsum K (fun m => k m * P m j) in
  let s := vsum K (fun l => k l * u l) + r in
  forall i j, (i < K)%nat -> (j < K)%nat ->
  matmul (fun a b => Y a b + k a * k b / r) (fun a b => P a b - u a * w b / s) i j = delta i j.
Proof.
  intros Y P k r HYP Hr Hs u w s i j Hi Hj. unfold matmul.
  assert (HYu : vsum K (fun l => Y i l * u l) = k i).
  { unfold u.
    rewrite (vsum_ext K _ (fun l => vsum K (fun m => Y i l * P l m * k m)))
      by (intros; rewrite <- vsum_scal_l; apply vsum_ext; intros; ring).
    rewrite vsum_swap.
    rewrite (vsum_ext K _ (fun m => delta i m * k m)).
    - apply vsum_delta_l; exact Hi.
    - intros m Hm. rewrite vsum_scal_r. f_equal. apply HYP; assumption. }
  rewrite (vsum_ext K _ (fun l => Y i l * P l j + (- (Y i l * u l) * (w j / s)
                                   + (k i / r) * (k l * P l j + - (k l * u l) * (w j / s)))))
    by (intros; field; split; assumption).
  rewrite vsum_plus, vsum_plus, vsum_scal_l, vsum_plus, vsum_scal_r, vsum_scal_r.
  rewrite (vsum_ext K (fun l => - (Y i l * u l)) (fun l => -1 * (Y i l * u l))) by (intros; ring).
  rewrite (vsum_ext K (fun l => - (k l * u l)) (fun l => -1 * (k l * u l))) by (intros; ring).
  rewrite !vsum_scal_l, HYu.
  replace (vsum K (fun l => Y i l * P l j)) with (matmul Y P i j) by reflexivity.
  rewrite HYP by assumption.
  replace (vsum K (fun l => k l * P l j)) with (w j) by reflexivity.
  replace (vsum K (fun l => k l * u l)) with (s - r) by (unfold s; ring).
  field. split; assumption.
Qed.

(** ... and the left inverse, given P Y = I. *)
Theorem sherman_morrison_rank_one_left : forall (Y P : nat -> nat -> R) (k : nat -> R) (r : R),
  (forall i j, (i < K)%nat -> (j < K)%nat -> matmul P Y i j = delta i j) ->
  r <> 0 ->
  vsum K (fun l => k l * vsum K (fun m => P l m * k m)) + r <> 0 ->
  let u := fun l => vsum K (fun m => P l m * k m) in
  let w := fun j => vsum K (fun m => k m * P m j) in
  let s := vsum K (fun l => k l * u l) + r in
  forall i j, (i < K)%nat -> (j < K)%nat ->
  matmul (fun a b => P a b - u a * w b / s) (fun a b => Y a b + k a * k b / r) i j = delta i j.
Proof.
  intros Y P k r HPY Hr Hs u w s i j Hi Hj. unfold matmul.
  assert (HwY : vsum K (fun l => w l * Y l j) = k j).
  { unfold w.
    rewrite (vsum_ext K _ (fun l => vsum K (fun m => k m * P m l * Y l j)))
      by (intros; rewrite <- vsum_scal_r; apply vsum_ext; intros; ring).
    rewrite vsum_swap.
    rewrite (vsum_ext K _ (fun m => delta m j * k m)).
    - rewrite (vsum_ext K _ (fun m => delta j m * k m)).
      + apply vsum_delta_l; exact Hj.
      + intros m Hm. unfold delta. rewrite Nat.eqb_sym. reflexivity.
    - intros m Hm. rewrite (vsum_ext K _ (fun l => k m * (P m l * Y l j))) by (intros; ring).
      rewrite vsum_scal_l.
      replace (vsum K (fun l => P m l * Y l j)) with (matmul P Y m j) by reflexivity.
      rewrite HPY by assumption. ring. }
  assert (Hwk : vsum K (fun l => w l * k l) = s - r).
  { unfold s, w, u. replace (vsum K (fun l => k l * vsum K (fun m => P l m * k m)) + r - r)
      with (vsum K (fun l => k l * vsum K (fun m => P l m * k m))) by ring.
    rewrite (vsum_ext K (fun l => vsum K (fun m => k m * P m l) * k l)
                        (fun l => vsum K (fun m => k m * P m l * k l)))
      by (intros; rewrite vsum_scal_r; reflexivity).
    rewrite vsum_swap. apply vsum_ext. intros m Hm.
    rewrite <- vsum_scal_l. apply vsum_ext. intros; ring. }
  rewrite (vsum_ext K _ (fun l => P i l * Y l j + ((k j / r) * (P i l * k l)
                                   + (- (u i / s)) * (w l * Y l j)
                                   + (- (u i * k j / (r * s))) * (w l * k l))))
    by (intros; field; split; assumption).
  rewrite vsum_plus, vsum_plus, vsum_plus, !vsum_scal_l, HwY, Hwk.
  replace (vsum K (fun l => P i l * Y l j)) with (matmul P Y i j) by reflexivity.
  rewrite HPY by assumption.
  replace (vsum K (fun l => P i l * k l)) with (u i) by reflexivity.
  field. split; assumption.
Qed.

End ShermanMorrison.
