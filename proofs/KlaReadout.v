(** * KLA's readout variance in floating point: the bound the fixtures store for y_var
    (docs/error-model.md, "KLA"; check/kla_bound.hpp)

    y_var_t = Σ_s q_s² / λ_s,t. The reference and the GPU kernel compute each term as
    fl(fl(q q) / λ̂) from the computed precision λ̂ (within e^{±E_s} of the exact λ: KlaStep.v for
    the sequential recursion, KlaScan.v for the scans) and add the S terms, the reference from +0 in
    order s = 0, 1, …, a kernel in an order of its own. This file proves, in FloatError.v's model
    (every operation one relative error of at most u), the bound check/kla_bound.hpp evaluates:

        |ŷ_var − y_var| ≤ Σ_s (q_s² / λ_s) (e^{E_s + (S + 1)η} − 1),   η = −ln(1 − u),

    for the terms summed by any binary tree ([readout_variance_error]: every summation order,
    each term keeping its own E_s), and for the reference's order from +0
    ([readout_variance_error_from_zero]; adding a rounded value to 0 is exact, [fl_idem]). The
    count: a term two roundings (q² and the quotient) past its λ̂ ([variance_term_rel]), a leaf of
    a tree of S leaves at most S − 1 additions deep (PositiveSum.v). *)

From Coq Require Import Reals Lra Lia List.
From KalmanOracle Require Import FloatError Birkhoff KlaStep PositiveSum.
Import ListNotations.
Open Scope R_scope.

Section Readout.

Variable u : R.
Hypothesis u_bounds : 0 <= u < 1.
Variable fl : R -> R.
Hypothesis fl_everywhere : forall x, fl_ok u fl x.

Let round := rel_round u u_bounds fl fl_everywhere.
Local Notation computed_sum := (PositiveSum.computed_sum fl).
Local Notation budget := (PositiveSum.budget u).
Local Notation sum_from := (PositiveSum.sum_from fl).

(** One readout-variance term: fl(fl(q q) / λ̂) from a λ̂ within E of λ > 0 is within E + 2η of
    q² / λ. *)
Lemma variance_term_rel : forall q lambda lambda_hat E, 0 < lambda -> rel E lambda lambda_hat ->
  rel (E + 2 * eta u) (q * q / lambda) (fl (fl (q * q) / lambda_hat)).
Proof.
  intros q lambda lambda_hat E Hl HE.
  eapply rel_mono; [|apply round, rel_div; [lra | apply round, rel_refl | exact HE]].
  lra.
Qed.

(** The readout variance of one token and channel, S ≥ 1 terms (q_s, λ_s, λ̂_s, E_s), summed by any
    tree: the bound of check/kla_bound.hpp, Σ_s (q_s²/λ_s) (e^{E_s + (S + 1)η} − 1). *)
Definition variance_leaf (q lambda lambda_hat E : R) : sum_tree :=
  Leaf (q * q / lambda) (fl (fl (q * q) / lambda_hat)) (E + 2 * eta u).

Theorem readout_variance_error : forall (T : sum_tree) (S : nat),
  leaf_count T = S ->
  (forall t c k, In (t, c, k) (leaf_terms T) ->
     exists q lambda lambda_hat E, 0 < lambda /\ 0 <= E /\ rel E lambda lambda_hat /\
       t = q * q / lambda /\ c = fl (fl (q * q) / lambda_hat) /\ k = E + 2 * eta u) ->
  Rabs (computed_sum T - exact_sum T) <= budget (S - 1) T.
Proof.
  intros T S HS Hterms. apply (sum_tree_error u u_bounds fl fl_everywhere).
  - refine (leaves_ok_from_terms _ T _ Hterms).
    intros t c k [q [lambda [lambda_hat [E [Hl [HE [Hr [-> [-> ->]]]]]]]]].
    pose proof (eta_nonneg u u_bounds).
    assert (0 <= q * q) by nra. assert (0 < / lambda) by (apply Rinv_0_lt_compat; exact Hl).
    split; [unfold Rdiv; nra|].
    split; [lra | apply variance_term_rel; assumption].
  - rewrite <- HS. apply depth_le_count.
Qed.

(** In the budget, a leaf of [variance_leaf q λ λ̂ E] at depth S − 1 contributes
    (q²/λ)(e^{E + (S + 1)η} − 1): the formula of check/kla_bound.hpp. *)
Lemma variance_leaf_budget : forall q lambda lambda_hat E S, (1 <= S)%nat ->
  budget (S - 1) (variance_leaf q lambda lambda_hat E) =
  q * q / lambda * (exp (E + (INR S + 1) * eta u) - 1).
Proof.
  intros q lambda lambda_hat E S HS. simpl. rewrite minus_INR by lia. simpl (INR 1).
  f_equal. f_equal. f_equal. ring.
Qed.

Hypothesis fl_idem : forall x, fl (fl x) = fl x.

(** The reference's y_var: the S = 1 + length rest terms added from +0 in order, the bound of
    check/kla_bound.hpp. *)
Corollary readout_variance_error_from_zero : forall (first : sum_tree) (rest : list sum_tree) p S,
  computed_sum first = fl p -> leaf_count (comb first rest) = S ->
  (forall t c k, In (t, c, k) (leaf_terms (comb first rest)) ->
     exists q lambda lambda_hat E, 0 < lambda /\ 0 <= E /\ rel E lambda lambda_hat /\
       t = q * q / lambda /\ c = fl (fl (q * q) / lambda_hat) /\ k = E + 2 * eta u) ->
  Rabs (sum_from 0 (map computed_sum (first :: rest)) - exact_sum (comb first rest))
    <= budget (S - 1) (comb first rest).
Proof.
  intros first rest p S Hfirst HS Hterms.
  rewrite (sum_from_zero_is_comb fl fl_idem first rest p Hfirst).
  exact (readout_variance_error (comb first rest) S HS Hterms).
Qed.

End Readout.
