(** * How far c + d x moves in log when x moves by a factor e^ε, |ε| ≤ E: the lemma behind
    check/contraction_bound.hpp's affine_log_error (docs/error-model.md, "KLA: the information mean
    and y"; the KDNs' predictions and gains use it the same way)

    KLA's mean coefficient α_t = ā / den_t reads the computed precision through den_t = ā² + p̄ λ_{t−1}.
    With c = ā² > 0, d = p̄ ≥ 0, x = λ_{t−1} > 0 and w = d x / (c + d x) ∈ [0, 1) (den's
    log-derivative in λ along the exact trajectory), a λ̂ = λ e^ε with |ε| ≤ E moves den by

        |ln(c + d x̂) − ln(c + d x)| ≤ ln(1 + w (e^E − 1))          ([affine_log_weight])

    which is at most E ([affine_log_weight_le]) and 0 when d = 0 ([affine_log_weight_zero]): where
    p̄ = 0, den does not read λ at all. The upward move is the larger: with a = e^E − 1 and
    b = 1 − e^{−E}, (1 + w a)(1 − w b) = 1 + w (1 − w) a b ≥ 1, since a − b = a b. *)

From Coq Require Import Reals Lra.
Open Scope R_scope.

Lemma exp_mono : forall x y, x <= y -> exp x <= exp y.
Proof.
  intros x y Hxy. destruct (Rle_lt_or_eq_dec x y Hxy) as [Hlt | ->].
  - left. apply exp_increasing, Hlt.
  - right. reflexivity.
Qed.

Lemma ln_mono : forall x y, 0 < x -> x <= y -> ln x <= ln y.
Proof.
  intros x y Hx Hxy. destruct (Rle_lt_or_eq_dec x y Hxy) as [Hlt | ->].
  - left. apply ln_increasing; assumption.
  - right. reflexivity.
Qed.

(** c + d x e^ε as (c + d x) times 1 + w (e^ε − 1). *)
Lemma affine_scaled : forall c d x eps, 0 < c + d * x ->
  c + d * (x * exp eps) = (c + d * x) * (1 + d * x / (c + d * x) * (exp eps - 1)).
Proof.
  intros c d x eps HD. field. lra.
Qed.

(** The weight lies in [0, 1]. *)
Lemma weight_bounds : forall c d x, 0 < c -> 0 <= d -> 0 < x ->
  0 <= d * x / (c + d * x) <= 1.
Proof.
  intros c d x Hc Hd Hx.
  assert (Hdx : 0 <= d * x) by (apply Rmult_le_pos; lra).
  split.
  - apply Rmult_le_pos; [lra | left; apply Rinv_0_lt_compat; lra].
  - apply (Rmult_le_reg_r (c + d * x)); [lra |].
    unfold Rdiv. rewrite Rmult_assoc, Rinv_l by lra. lra.
Qed.

(** (1 + w a)(1 − w b) ≥ 1 for w ∈ [0, 1], a = e^E − 1, b = 1 − e^{−E}. *)
Lemma up_dominates_down : forall w E, 0 <= w <= 1 -> 0 <= E ->
  1 <= (1 + w * (exp E - 1)) * (1 - w * (1 - exp (- E))).
Proof.
  intros w E Hw HE.
  assert (Hinv : exp E * exp (- E) = 1) by (rewrite <- exp_plus; replace (E + - E) with 0 by ring; apply exp_0).
  assert (Ha : 0 <= exp E - 1) by (assert (1 <= exp E) by (rewrite <- exp_0; apply exp_mono; lra); lra).
  assert (Hb : 0 <= 1 - exp (- E)).
  { assert (exp (- E) <= 1) by (rewrite <- exp_0; apply exp_mono; lra). lra. }
  (* (1 + w a)(1 − w b) = 1 + w (a − b) − w² a b and a − b = a b. *)
  assert (Hab : (exp E - 1) - (1 - exp (- E)) = (exp E - 1) * (1 - exp (- E))).
  { replace ((exp E - 1) * (1 - exp (- E))) with (exp E - exp E * exp (- E) - 1 + exp (- E)) by ring.
    rewrite Hinv. ring. }
  replace ((1 + w * (exp E - 1)) * (1 - w * (1 - exp (- E))))
    with (1 + w * ((exp E - 1) - (1 - exp (- E))) - w * w * ((exp E - 1) * (1 - exp (- E)))) by ring.
  rewrite Hab.
  replace (1 + w * ((exp E - 1) * (1 - exp (- E))) - w * w * ((exp E - 1) * (1 - exp (- E))))
    with (1 + w * (1 - w) * ((exp E - 1) * (1 - exp (- E)))) by ring.
  assert (0 <= w * (1 - w) * ((exp E - 1) * (1 - exp (- E)))).
  { apply Rmult_le_pos; [apply Rmult_le_pos; lra | apply Rmult_le_pos; lra]. }
  lra.
Qed.

Theorem affine_log_weight : forall c d x E eps, 0 < c -> 0 <= d -> 0 < x -> Rabs eps <= E ->
  Rabs (ln (c + d * (x * exp eps)) - ln (c + d * x)) <= ln (1 + d * x / (c + d * x) * (exp E - 1)).
Proof.
  intros c d x E eps Hc Hd Hx Heps.
  assert (Hdx : 0 <= d * x) by (apply Rmult_le_pos; lra).
  assert (HD : 0 < c + d * x) by lra.
  pose proof (weight_bounds c d x Hc Hd Hx) as Hw.
  set (w := d * x / (c + d * x)) in *.
  assert (HE : 0 <= E) by (pose proof (Rabs_pos eps); lra).
  assert (Hepos : 0 < exp eps) by apply exp_pos.
  assert (Hy : 0 < 1 + w * (exp eps - 1)).
  { assert (0 <= w * exp eps) by (apply Rmult_le_pos; lra).
    replace (1 + w * (exp eps - 1)) with ((1 - w) + w * exp eps) by ring.
    destruct (Rle_lt_or_eq_dec w 1 (proj2 Hw)) as [Hlt | Heq].
    - lra.
    - subst w. rewrite Heq. lra. }
  rewrite (affine_scaled c d x eps HD). fold w.
  rewrite ln_mult by lra.
  replace (ln (c + d * x) + ln (1 + w * (exp eps - 1)) - ln (c + d * x)) with (ln (1 + w * (exp eps - 1))) by ring.
  assert (Hrange : - E <= eps <= E).
  { unfold Rabs in Heps. destruct (Rcase_abs eps); lra. }
  assert (HeE : exp eps <= exp E) by (apply exp_mono; lra).
  assert (HemE : exp (- E) <= exp eps) by (apply exp_mono; lra).
  assert (Hup : 0 < 1 + w * (exp E - 1)).
  { assert (1 <= exp E) by (rewrite <- exp_0; apply exp_mono; lra).
    assert (0 <= w * (exp E - 1)) by (apply Rmult_le_pos; lra). lra. }
  destruct (Rle_or_lt 0 eps) as [Hpos | Hneg].
  - (* Up: 1 ≤ y ≤ 1 + w (e^E − 1). *)
    assert (H1 : 1 <= 1 + w * (exp eps - 1)).
    { assert (1 <= exp eps) by (rewrite <- exp_0; apply exp_mono; lra).
      assert (0 <= w * (exp eps - 1)) by (apply Rmult_le_pos; lra). lra. }
    rewrite Rabs_right by (rewrite <- ln_1; apply Rle_ge, ln_mono; lra).
    apply ln_mono; [lra |].
    assert (w * (exp eps - 1) <= w * (exp E - 1)) by (apply Rmult_le_compat_l; lra). lra.
  - (* Down: 1 − w (1 − e^{−E}) ≤ y ≤ 1, and 1 / (1 − w b) ≤ 1 + w a. *)
    assert (Hy1 : 1 + w * (exp eps - 1) <= 1).
    { assert (exp eps <= 1) by (rewrite <- exp_0; apply exp_mono; lra).
      assert (w * (exp eps - 1) <= 0).
      { rewrite <- (Rmult_0_r w). apply Rmult_le_compat_l; lra. }
      lra. }
    assert (Hlow : 1 - w * (1 - exp (- E)) <= 1 + w * (exp eps - 1)).
    { assert (w * (exp (- E) - 1) <= w * (exp eps - 1)) by (apply Rmult_le_compat_l; lra). lra. }
    assert (Hlowpos : 0 < 1 - w * (1 - exp (- E))).
    { replace (1 - w * (1 - exp (- E))) with ((1 - w) + w * exp (- E)) by ring.
      pose proof (exp_pos (- E)).
      destruct (Rle_lt_or_eq_dec w 1 (proj2 Hw)) as [Hlt | Heq].
      - assert (0 <= w * exp (- E)) by (apply Rmult_le_pos; lra). lra.
      - rewrite Heq. lra. }
    rewrite Rabs_left1 by (rewrite <- ln_1; apply ln_mono; lra).
    (* − ln y ≤ − ln (1 − w b) = ln (1 / (1 − w b)) ≤ ln (1 + w a). *)
    apply Rle_trans with (- ln (1 - w * (1 - exp (- E)))).
    + apply Ropp_le_contravar, ln_mono; lra.
    + rewrite <- ln_Rinv by lra. apply ln_mono; [apply Rinv_0_lt_compat; lra |].
      pose proof (up_dominates_down w E Hw HE) as Hdom.
      apply (Rmult_le_reg_r (1 - w * (1 - exp (- E)))); [lra |].
      rewrite Rinv_l by lra. lra.
Qed.

(** The weighted bound never exceeds the unweighted one, E. *)
Lemma affine_log_weight_le : forall c d x E, 0 < c -> 0 <= d -> 0 < x -> 0 <= E ->
  ln (1 + d * x / (c + d * x) * (exp E - 1)) <= E.
Proof.
  intros c d x E Hc Hd Hx HE.
  pose proof (weight_bounds c d x Hc Hd Hx) as Hw.
  assert (Ha : 0 <= exp E - 1) by (assert (1 <= exp E) by (rewrite <- exp_0; apply exp_mono; lra); lra).
  rewrite <- (ln_exp E) at 2.
  apply ln_mono.
  - assert (0 <= d * x / (c + d * x) * (exp E - 1)) by (apply Rmult_le_pos; lra). lra.
  - assert (d * x / (c + d * x) * (exp E - 1) <= 1 * (exp E - 1)) by (apply Rmult_le_compat_r; lra). lra.
Qed.

(** Where d = 0 (p̄ = 0) the coefficient does not read x: the weighted bound is 0. *)
Lemma affine_log_weight_zero : forall c x E, 0 < c -> ln (1 + 0 * x / (c + 0 * x) * (exp E - 1)) = 0.
Proof.
  intros c x E Hc.
  replace (1 + 0 * x / (c + 0 * x) * (exp E - 1)) with 1 by (field; lra).
  apply ln_1.
Qed.
