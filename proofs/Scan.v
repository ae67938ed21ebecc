(** * Scans over any monoid: docs/math.md §8 fact 2; reference/include/kalman_oracle/scan/*.hpp.

    The operation is [op later earlier] (later on the left, as [monoid.compose]); the
    inclusive scan of x₀ … x_{n−1} is [x₀, x₁∘x₀, …, x_{n−1}∘…∘x₀] and the exclusive one
    [e, x₀, …, x_{n−2}∘…∘x₀].  Every schedule is defined for an arbitrary type and operation;
    the theorems assume only associativity and a two-sided identity, and hold for every
    length n (and, for the chunked scan, every chunk size c ≥ 1).

    Models, and how each follows the C++:
    - [seq_inclusive]: the fold of sequential.hpp (out[0] = x₀, out[t] = x_t ∘ out[t−1]).
    - [hillis_steele]: index-level, level by level (d = 1, 2, 4, … < n), each level a pure
      function of the previous one at every index: i ≥ d gets a[i] ∘ a[i−d], the rest is
      unchanged.  The C++ has no such function: it keeps two buffers, writes [d, n), copies only
      [d/2, d) and leaves [0, d/2) two levels old (equal there, since those positions stopped
      changing), then swaps them.
    - [sklansky]: index-level, level by level (s = 1, 2, 4, … < n): i < n with bit s set
      (⌊i/s⌋ odd) gets a[i] ∘ a[⌊i/2s⌋·2s + s − 1], reading the previous level only.  The C++
      updates one array in place, block by block (the source (i & ~(2s−1)) + s − 1 has bit s
      clear, so no level reads a position it has already written).
    - [brent_kung]: the recursive odd/even form of the level-by-level schedule.  Up-sweep level
      s = 1 pairs positions (2j, 2j+1) into a[2j+1] = x_{2j+1} ∘ x_{2j}; every later up-sweep
      and down-sweep level s ≥ 2 touches only odd positions and is level s/2 of the same
      schedule run on the ⌊n/2⌋ pairs (the recursive call); the last down-sweep level (s = 1)
      gives a[2j] = x_{2j} ∘ a[2j−1] for j ≥ 1.  Same composes, same operands, same order.
    - [blelloch_exclusive] / [blelloch_inclusive]: the recursive form of the unpadded
      up/down-sweep of blelloch.hpp.  Up-sweep level d = 1 pairs (2j, 2j+1), an unpaired last
      element (n odd) passes up unchanged (the C++ block stored at min(i+2d−1, n−1)); the
      higher levels are the recursive call on the ⌈n/2⌉ pair totals, which returns their
      exclusive prefixes P_j and the total; down-sweep level d = 1 writes a[2j] = P_j (the
      parent's prefix) and a[2j+1] = x_{2j} ∘ P_j (left subtree total, later, on the left),
      a plain copy x₀ for the block starting at 0 (no compose with the identity, as in the
      C++), and an unpaired last element gets its P.  Inclusive = exclusive shifted left, the
      total last.
    - [chunked]: map (a sequential scan inside each chunk of c, its total the last local
      prefix), carry (the sequential exclusive scan of the totals), emit (local ∘ carry[k] in
      chunks k ≥ 1; chunk 0 untouched), as chunked.hpp, but on a list of chunks where the
      C++ updates one vector in place.
    - [exclusive_from_inclusive]: derive.hpp (identity, then the inclusive scan of the first
      n − 1 inputs).

    None of these correspondences is a theorem.  They are checked mechanically by the CTest
    test proof.scan_fidelity (coq_check.py fidelity): the models here, extracted to OCaml
    (fidelity/ScanExtraction.v), and the compiled C++ headers (fidelity/scan_trees.cpp) run on
    expression trees, and every output tree must be the same, compose for compose and operand for
    operand (n = 0 … 64 and 2^k − 1, 2^k, 2^k + 1 for k = 7 … 10; chunk sizes 1, 2, 3, 5, 8, 16,
    64; docs/proofs.md, "How the models follow the C++"). *)

From Coq Require Import List Arith Lia Bool.
Import ListNotations.

Section Scans.

Variable A : Type.
Variable op : A -> A -> A.
Variable e : A.

(** ** Specifications *)

(** [prod [x₀; …; x_k]] = x_k ∘ … ∘ x₀. *)
Fixpoint prod (xs : list A) : A :=
  match xs with
  | [] => e
  | x :: r => op (prod r) x
  end.

Definition inclusive_spec (xs : list A) : list A :=
  map (fun k => prod (firstn (S k) xs)) (seq 0 (length xs)).

Definition exclusive_spec (xs : list A) : list A :=
  map (fun k => prod (firstn k xs)) (seq 0 (length xs)).

(** ** The sequential fold (sequential.hpp) *)

(** [scan_from a xs]: the inclusive prefixes of xs, each composed on the right with a. *)
Fixpoint scan_from (a : A) (xs : list A) : list A :=
  match xs with
  | [] => []
  | x :: r => let p := op x a in p :: scan_from p r
  end.

(** [excl_from a xs]: the exclusive prefixes, each composed on the right with a. *)
Fixpoint excl_from (a : A) (xs : list A) : list A :=
  match xs with
  | [] => []
  | x :: r => a :: excl_from (op x a) r
  end.

(** out[0] = x₀ (the raw leaf, never x₀ ∘ e), out[t] = x_t ∘ out[t−1]. *)
Definition seq_inclusive (xs : list A) : list A :=
  match xs with
  | [] => []
  | x :: r => x :: scan_from x r
  end.

(** derive.hpp: exclusive[0] = e, then the inclusive scan of the first n − 1 inputs. *)
Definition exclusive_from_inclusive (inclusive : list A -> list A) (xs : list A) : list A :=
  match xs with
  | [] => []
  | _ => e :: inclusive (removelast xs)
  end.

Definition seq_exclusive (xs : list A) : list A := exclusive_from_inclusive seq_inclusive xs.

(** ** Index-level arrays *)

Definition to_list (n : nat) (a : nat -> A) : list A := map a (seq 0 n).

(** [range x lo len] = x_{lo+len−1} ∘ … ∘ x_lo. *)
Fixpoint range (x : nat -> A) (lo len : nat) : A :=
  match len with
  | 0 => e
  | S k => op (x (lo + k)) (range x lo k)
  end.

(** [seg x lo hi] = x_hi ∘ … ∘ x_lo (lo ≤ hi). *)
Definition seg (x : nat -> A) (lo hi : nat) : A := range x lo (S hi - lo).

(** ** Hillis–Steele (hillis_steele.hpp) *)

Definition hs_level (n d : nat) (a : nat -> A) : nat -> A :=
  fun i => if (d <=? i) && (i <? n) then op (a i) (a (i - d)) else a i.

Fixpoint hs_levels (fuel n d : nat) (a : nat -> A) : nat -> A :=
  match fuel with
  | 0 => a
  | S f => if d <? n then hs_levels f n (2 * d) (hs_level n d a) else a
  end.

Definition hillis_steele (xs : list A) : list A :=
  let n := length xs in to_list n (hs_levels n n 1 (fun i => nth i xs e)).

(** ** Sklansky (sklansky.hpp) *)

Definition skl_level (n s : nat) (a : nat -> A) : nat -> A :=
  fun i => if (i <? n) && Nat.odd (i / s)
           then op (a i) (a (i / (2 * s) * (2 * s) + s - 1))
           else a i.

Fixpoint skl_levels (fuel n s : nat) (a : nat -> A) : nat -> A :=
  match fuel with
  | 0 => a
  | S f => if s <? n then skl_levels f n (2 * s) (skl_level n s a) else a
  end.

Definition sklansky (xs : list A) : list A :=
  let n := length xs in to_list n (skl_levels n n 1 (fun i => nth i xs e)).

(** ** Brent–Kung (brent_kung.hpp), recursive odd/even form *)

(** Up-sweep level 1: a[2j+1] = x_{2j+1} ∘ x_{2j}; an unpaired last element is not written. *)
Fixpoint pairs (xs : list A) : list A :=
  match xs with
  | x0 :: x1 :: r => op x1 x0 :: pairs r
  | _ => []
  end.

(** Down-sweep level 1, given [ys], the inclusive scan of the pairs: odd positions take
    ys_j; even positions 2j ≥ 2 take x_{2j} ∘ ys_{j−1} (the full prefix just before); x₀
    stays. *)
Fixpoint bk_weave (first : bool) (prev : A) (xs ys : list A) : list A :=
  match xs, ys with
  | x0 :: x1 :: r, y :: ys' => (if first then x0 else op x0 prev) :: y :: bk_weave false y r ys'
  | [x0], _ => [if first then x0 else op x0 prev]
  | _, _ => []
  end.

Fixpoint brent_kung_fuel (fuel : nat) (xs : list A) : list A :=
  match fuel with
  | 0 => xs
  | S f =>
      match xs with
      | [] | [_] => xs
      | _ => bk_weave true e xs (brent_kung_fuel f (pairs xs))
      end
  end.

Definition brent_kung (xs : list A) : list A := brent_kung_fuel (length xs) xs.

(** ** Blelloch (blelloch.hpp), recursive form without padding *)

(** Up-sweep level 1: pair totals x_{2j+1} ∘ x_{2j}; an unpaired last element passes up. *)
Fixpoint bpairs (xs : list A) : list A :=
  match xs with
  | x0 :: x1 :: r => op x1 x0 :: bpairs r
  | r => r
  end.

(** Down-sweep level 1, given [ps], the exclusive prefixes of the pair totals: left child
    a[2j] = ps_j (the parent's prefix), right child a[2j+1] = x_{2j} ∘ ps_j (left subtree
    total on the left), a copy for the block starting at 0. *)
Fixpoint bl_down (first : bool) (xs ps : list A) : list A :=
  match xs, ps with
  | x0 :: x1 :: r, p :: ps' => p :: (if first then x0 else op x0 p) :: bl_down false r ps'
  | [_], p :: _ => [p]
  | _, _ => []
  end.

(** Returns the exclusive scan and the total (the up-sweep's root). *)
Fixpoint blelloch_fuel (fuel : nat) (xs : list A) : list A * A :=
  match fuel with
  | 0 => ([], e)
  | S f =>
      match xs with
      | [] => ([], e)
      | [x] => ([e], x)
      | _ => let (ps, t) := blelloch_fuel f (bpairs xs) in (bl_down true xs ps, t)
      end
  end.

Definition blelloch_exclusive (xs : list A) : list A := fst (blelloch_fuel (length xs) xs).

Definition blelloch_inclusive (xs : list A) : list A :=
  match xs with
  | [] => []
  | _ => let (ex, t) := blelloch_fuel (length xs) xs in tl ex ++ [t]
  end.

(** ** Chunked map / carry / emit (chunked.hpp) *)

Fixpoint chunks (fuel c : nat) (xs : list A) : list (list A) :=
  match fuel with
  | 0 => []
  | S f =>
      match xs with
      | [] => []
      | _ => firstn c xs :: chunks f c (skipn c xs)
      end
  end.

Definition emit (local carry : list A) : list A := map (fun y => op y (hd e carry)) local.

Definition chunked (c : nat) (xs : list A) : list A :=
  let cs := chunks (length xs) c xs in
  let local := map seq_inclusive cs in             (* map *)
  let totals := map (fun l => last l e) local in   (* each chunk's total *)
  let carry := seq_exclusive totals in             (* carry *)
  match local, carry with                           (* emit, chunk 0 untouched *)
  | l0 :: ls, _ :: cs' => l0 ++ concat (map (fun '(l, cr) => map (fun y => op y cr) l)
                                            (combine ls cs'))
  | _, _ => []
  end.

(** ** Proofs *)

Hypothesis op_assoc : forall x y z, op x (op y z) = op (op x y) z.
Hypothesis op_id_l : forall x, op e x = x.
Hypothesis op_id_r : forall x, op x e = x.

Lemma prod_app : forall l1 l2, prod (l1 ++ l2) = op (prod l2) (prod l1).
Proof.
  induction l1 as [|x r IH]; intros l2; simpl.
  - rewrite op_id_r; reflexivity.
  - rewrite IH, op_assoc; reflexivity.
Qed.

Lemma map_seq_shift : forall (f : nat -> A) n,
  map f (seq 0 (S n)) = f 0 :: map (fun k => f (S k)) (seq 0 n).
Proof.
  intros f n; simpl. f_equal. rewrite <- seq_shift, map_map. reflexivity.
Qed.

Lemma scan_from_spec : forall xs a,
  scan_from a xs = map (fun k => op (prod (firstn (S k) xs)) a) (seq 0 (length xs)).
Proof.
  induction xs as [|x r IH]; intros a; [reflexivity|].
  simpl length; rewrite map_seq_shift; simpl.
  rewrite op_id_l. f_equal. rewrite IH. apply map_ext. intros k.
  rewrite op_assoc. reflexivity.
Qed.

Lemma excl_from_spec : forall xs a,
  excl_from a xs = map (fun k => op (prod (firstn k xs)) a) (seq 0 (length xs)).
Proof.
  induction xs as [|x r IH]; intros a; [reflexivity|].
  simpl length; rewrite map_seq_shift; simpl.
  rewrite op_id_l. f_equal. rewrite IH. apply map_ext. intros k.
  rewrite op_assoc. reflexivity.
Qed.

Lemma map_ext_id : forall (f : nat -> A) l, map (fun k => op (f k) e) l = map f l.
Proof. intros; apply map_ext; intros; apply op_id_r. Qed.

Lemma scan_from_e : forall xs, scan_from e xs = inclusive_spec xs.
Proof. intros; rewrite scan_from_spec; apply map_ext_id. Qed.

Lemma excl_from_e : forall xs, excl_from e xs = exclusive_spec xs.
Proof. intros; rewrite excl_from_spec; apply map_ext_id. Qed.

Theorem seq_inclusive_scan_from : forall xs, seq_inclusive xs = scan_from e xs.
Proof.
  intros [|x r]; [reflexivity|]. simpl. rewrite op_id_r. reflexivity.
Qed.

(** The sequential fold is the inclusive prefix. *)
Theorem seq_inclusive_correct : forall xs, seq_inclusive xs = inclusive_spec xs.
Proof. intros; rewrite seq_inclusive_scan_from; apply scan_from_e. Qed.

Lemma removelast_excl : forall xs a, xs <> [] ->
  a :: scan_from a (removelast xs) = excl_from a xs.
Proof.
  induction xs as [|x r IH]; intros a Hne; [contradiction|].
  destruct r as [|y r'].
  - reflexivity.
  - change (removelast (x :: y :: r')) with (x :: removelast (y :: r')).
    simpl scan_from. simpl excl_from. f_equal.
    apply IH. discriminate.
Qed.

(** Any correct inclusive scan gives, through derive.hpp, the exclusive prefix. *)
Theorem exclusive_from_inclusive_correct : forall inclusive,
  (forall ys, inclusive ys = seq_inclusive ys) ->
  forall xs, exclusive_from_inclusive inclusive xs = exclusive_spec xs.
Proof.
  intros inclusive Hinc xs. rewrite <- excl_from_e.
  destruct xs as [|x r]; [reflexivity|].
  unfold exclusive_from_inclusive. rewrite Hinc, seq_inclusive_scan_from.
  apply removelast_excl. discriminate.
Qed.

Theorem seq_exclusive_correct : forall xs, seq_exclusive xs = exclusive_spec xs.
Proof. apply exclusive_from_inclusive_correct. reflexivity. Qed.

(** *** Segments *)

Lemma range_add : forall x lo a b,
  range x lo (a + b) = op (range x (lo + a) b) (range x lo a).
Proof.
  intros x lo a b; induction b as [|b IH].
  - rewrite Nat.add_0_r; simpl; rewrite op_id_l; reflexivity.
  - replace (a + S b) with (S (a + b)) by lia. simpl. rewrite IH, op_assoc.
    replace (lo + (a + b)) with (lo + a + b) by lia. reflexivity.
Qed.

Lemma seg_split : forall x lo m hi, lo <= m -> m < hi ->
  seg x lo hi = op (seg x (S m) hi) (seg x lo m).
Proof.
  intros x lo m hi H1 H2; unfold seg.
  replace (S hi - lo) with ((S m - lo) + (S hi - S m)) by lia.
  rewrite range_add. replace (lo + (S m - lo)) with (S m) by lia. reflexivity.
Qed.

Lemma seg_single : forall x i, seg x i i = x i.
Proof.
  intros; unfold seg; replace (S i - i) with 1 by lia; simpl.
  rewrite Nat.add_0_r, op_id_r; reflexivity.
Qed.

Lemma firstn_S_nth : forall (xs : list A) k, k < length xs ->
  firstn (S k) xs = firstn k xs ++ [nth k xs e].
Proof.
  induction xs as [|x r IH]; intros k Hk; simpl in Hk; [lia|].
  destruct k as [|k]; [reflexivity|].
  change (firstn (S (S k)) (x :: r)) with (x :: firstn (S k) r).
  rewrite IH by lia. reflexivity.
Qed.

Lemma range_prod : forall xs k, k <= length xs ->
  range (fun i => nth i xs e) 0 k = prod (firstn k xs).
Proof.
  intros xs k; induction k as [|k IH]; intros Hk.
  - rewrite firstn_O; reflexivity.
  - rewrite firstn_S_nth by lia. rewrite prod_app. simpl.
    rewrite IH by lia. rewrite op_id_l. reflexivity.
Qed.

Lemma to_list_spec : forall xs (a : nat -> A),
  (forall i, i < length xs -> a i = seg (fun j => nth j xs e) 0 i) ->
  to_list (length xs) a = inclusive_spec xs.
Proof.
  intros xs a H. unfold to_list, inclusive_spec. apply map_ext_in.
  intros k Hk. apply in_seq in Hk. rewrite H by lia. unfold seg.
  rewrite Nat.sub_0_r. apply range_prod. lia.
Qed.

(** *** Hillis–Steele *)

Section HS.
Variable n : nat.
Variable x : nat -> A.

Definition hs_inv (d : nat) (a : nat -> A) : Prop :=
  forall i, i < n -> a i = seg x (S i - d) i.

Lemma hs_level_inv : forall d a, 1 <= d -> hs_inv d a -> hs_inv (2 * d) (hs_level n d a).
Proof.
  intros d a Hd Hinv i Hi. unfold hs_level.
  destruct (d <=? i) eqn:E1; destruct (i <? n) eqn:E2; cbv [andb];
    apply Nat.leb_le in E1 || apply Nat.leb_gt in E1;
    apply Nat.ltb_lt in E2 || apply Nat.ltb_ge in E2; try lia.
  - rewrite (Hinv i Hi), (Hinv (i - d)) by lia.
    rewrite (seg_split x (S i - 2 * d) (i - d) i) by lia.
    replace (S (i - d) - d) with (S i - 2 * d) by lia.
    replace (S (i - d)) with (S i - d) by lia. reflexivity.
  - rewrite (Hinv i Hi). replace (S i - d) with 0 by lia.
    replace (S i - 2 * d) with 0 by lia. reflexivity.
Qed.

Lemma hs_levels_inv : forall fuel d a, 1 <= d -> n <= d + fuel -> hs_inv d a ->
  forall i, i < n -> hs_levels fuel n d a i = seg x 0 i.
Proof.
  induction fuel as [|f IH]; intros d a Hd Hf Hinv i Hi; simpl.
  - rewrite (Hinv i Hi). f_equal. lia.
  - destruct (d <? n) eqn:E.
    + apply IH; [lia|lia|apply hs_level_inv; assumption|assumption].
    + apply Nat.ltb_ge in E. rewrite (Hinv i Hi). f_equal. lia.
Qed.

End HS.

Theorem hillis_steele_correct : forall xs, hillis_steele xs = inclusive_spec xs.
Proof.
  intros xs. unfold hillis_steele. apply to_list_spec. intros i Hi.
  apply hs_levels_inv; [lia|lia| |assumption].
  intros j Hj. replace (S j - 1) with j by lia. symmetry; apply seg_single.
Qed.

(** *** Sklansky *)

Lemma div_mul_parity : forall i s, s <> 0 ->
  i / (2 * s) * (2 * s) + (if Nat.odd (i / s) then s else 0) = i / s * s.
Proof.
  intros i s Hs.
  rewrite (Nat.mul_comm 2 s), <- Nat.div_div by lia.
  set (q := i / s).
  pose proof (Nat.div2_odd q) as Hq. rewrite Nat.div2_div in Hq.
  set (h := q / 2) in *.
  destruct (Nat.odd q); simpl Nat.b2n in Hq.
  - transitivity ((2 * h + 1) * s); [ring|rewrite <- Hq; reflexivity].
  - transitivity ((2 * h + 0) * s); [ring|rewrite <- Hq; reflexivity].
Qed.

Lemma div_block_source : forall i s, s <> 0 ->
  (i / (2 * s) * (2 * s) + s - 1) / s * s = i / (2 * s) * (2 * s).
Proof.
  intros i s Hs.
  replace (i / (2 * s) * (2 * s) + s - 1) with ((i / (2 * s) * 2) * s + (s - 1)) by lia.
  rewrite Nat.div_add_l by lia. rewrite (Nat.div_small (s - 1) s) by lia. lia.
Qed.

Section Sklansky.
Variable n : nat.
Variable x : nat -> A.

Definition skl_inv (s : nat) (a : nat -> A) : Prop :=
  forall i, i < n -> a i = seg x (i / s * s) i.

Lemma div_mul_le : forall i s, s <> 0 -> i / s * s <= i.
Proof. intros i s Hs. rewrite Nat.mul_comm. apply Nat.mul_div_le. exact Hs. Qed.

Lemma skl_level_inv : forall s a, 1 <= s -> skl_inv s a -> skl_inv (2 * s) (skl_level n s a).
Proof.
  intros s a Hs Hinv i Hi. unfold skl_level.
  pose proof (div_mul_parity i s ltac:(lia)) as Hp.
  pose proof (div_mul_le i s ltac:(lia)) as Hle.
  pose proof (div_block_source i s ltac:(lia)) as Hsrc.
  set (B := i / (2 * s) * (2 * s)) in *.
  assert (Hi' : (i <? n) = true) by (apply Nat.ltb_lt; exact Hi). rewrite Hi'. cbv [andb].
  destruct (Nat.odd (i / s)) eqn:Eo.
  - rewrite (Hinv i Hi), (Hinv (B + s - 1)) by lia.
    rewrite Hsrc.
    rewrite (seg_split x B (B + s - 1) i) by lia.
    replace (S (B + s - 1)) with (i / s * s) by lia. reflexivity.
  - rewrite (Hinv i Hi). f_equal. lia.
Qed.

Lemma skl_levels_inv : forall fuel s a, 1 <= s -> n <= s + fuel -> skl_inv s a ->
  forall i, i < n -> skl_levels fuel n s a i = seg x 0 i.
Proof.
  induction fuel as [|f IH]; intros s a Hs Hf Hinv i Hi; simpl.
  - rewrite (Hinv i Hi). rewrite Nat.div_small by lia. reflexivity.
  - destruct (s <? n) eqn:E.
    + apply IH; [lia|lia|apply skl_level_inv; assumption|assumption].
    + apply Nat.ltb_ge in E. rewrite (Hinv i Hi). rewrite Nat.div_small by lia. reflexivity.
Qed.

End Sklansky.

Theorem sklansky_correct : forall xs, sklansky xs = inclusive_spec xs.
Proof.
  intros xs. unfold sklansky. apply to_list_spec. intros i Hi.
  apply skl_levels_inv; [lia|lia| |assumption].
  intros j Hj. rewrite Nat.div_1_r, Nat.mul_1_r. symmetry; apply seg_single.
Qed.

(** *** Brent–Kung *)

Lemma pairs_length : forall xs, 2 * length (pairs xs) <= length xs.
Proof.
  fix IH 1. intros [|x0 [|x1 r]]; simpl; try lia.
  specialize (IH r). lia.
Qed.

Lemma bk_weave_correct : forall xs a first, (first = true -> a = e) ->
  bk_weave first a xs (scan_from a (pairs xs)) = scan_from a xs.
Proof.
  fix IH 1. intros [|x0 [|x1 r]] a first Hf.
  - reflexivity.
  - simpl. destruct first; [rewrite (Hf eq_refl), op_id_r|]; reflexivity.
  - simpl. rewrite IH by discriminate. rewrite <- op_assoc.
    destruct first; [rewrite (Hf eq_refl), op_id_r|]; reflexivity.
Qed.

Lemma brent_kung_fuel_correct : forall fuel xs, length xs <= fuel ->
  brent_kung_fuel fuel xs = scan_from e xs.
Proof.
  induction fuel as [|f IH]; intros xs Hl.
  - destruct xs; [reflexivity|simpl in Hl; lia].
  - destruct xs as [|x0 [|x1 r]].
    + reflexivity.
    + simpl. rewrite op_id_r. reflexivity.
    + change (brent_kung_fuel (S f) (x0 :: x1 :: r))
        with (bk_weave true e (x0 :: x1 :: r) (brent_kung_fuel f (pairs (x0 :: x1 :: r)))).
      rewrite IH.
      * apply bk_weave_correct. reflexivity.
      * pose proof (pairs_length (x0 :: x1 :: r)). simpl in *. lia.
Qed.

Theorem brent_kung_correct : forall xs, brent_kung xs = inclusive_spec xs.
Proof.
  intros xs. unfold brent_kung. rewrite brent_kung_fuel_correct by lia. apply scan_from_e.
Qed.

(** *** Blelloch *)

Lemma bpairs_length : forall xs, length (bpairs xs) + length xs / 2 = length xs.
Proof.
  fix IH 1. intros [|x0 [|x1 r]]; try reflexivity.
  cbn [bpairs length]. specialize (IH r).
  replace (S (S (length r))) with (1 * 2 + length r) by lia.
  rewrite Nat.div_add_l by lia. lia.
Qed.

Lemma bpairs_prod : forall xs, prod (bpairs xs) = prod xs.
Proof.
  fix IH 1. intros [|x0 [|x1 r]]; try reflexivity.
  simpl. rewrite IH. rewrite op_assoc. reflexivity.
Qed.

Lemma bl_down_correct : forall xs a first, (first = true -> a = e) ->
  bl_down first xs (excl_from a (bpairs xs)) = excl_from a xs.
Proof.
  fix IH 1. intros [|x0 [|x1 r]] a first Hf.
  - reflexivity.
  - reflexivity.
  - simpl. rewrite IH by discriminate. rewrite <- op_assoc.
    destruct first; [rewrite (Hf eq_refl), op_id_r|]; reflexivity.
Qed.

Lemma blelloch_fuel_correct : forall fuel xs, length xs <= fuel ->
  blelloch_fuel fuel xs = (excl_from e xs, prod xs).
Proof.
  induction fuel as [|f IH]; intros xs Hl.
  - destruct xs; [reflexivity|simpl in Hl; lia].
  - destruct xs as [|x0 [|x1 r]].
    + reflexivity.
    + simpl. rewrite op_id_l. reflexivity.
    + change (blelloch_fuel (S f) (x0 :: x1 :: r))
        with (let (ps, t) := blelloch_fuel f (bpairs (x0 :: x1 :: r)) in
              (bl_down true (x0 :: x1 :: r) ps, t)).
      rewrite IH.
      * rewrite bpairs_prod, bl_down_correct; reflexivity.
      * pose proof (bpairs_length (x0 :: x1 :: r)) as H.
        assert (0 < length (x0 :: x1 :: r) / 2).
        { apply Nat.div_str_pos. simpl; lia. }
        simpl length in *. lia.
Qed.

Theorem blelloch_exclusive_correct : forall xs, blelloch_exclusive xs = exclusive_spec xs.
Proof.
  intros xs. unfold blelloch_exclusive. rewrite blelloch_fuel_correct by lia.
  apply excl_from_e.
Qed.

Lemma excl_from_snoc : forall xs a, excl_from a xs ++ [op (prod xs) a] = a :: scan_from a xs.
Proof.
  induction xs as [|x r IH]; intros a; simpl.
  - rewrite op_id_l; reflexivity.
  - f_equal. rewrite <- op_assoc. apply IH.
Qed.

Theorem blelloch_inclusive_correct : forall xs, blelloch_inclusive xs = inclusive_spec xs.
Proof.
  intros xs. rewrite <- scan_from_e. destruct xs as [|x r]; [reflexivity|].
  unfold blelloch_inclusive. rewrite blelloch_fuel_correct by lia.
  pose proof (excl_from_snoc (x :: r) e) as H. rewrite op_id_r in H.
  simpl excl_from in *. simpl tl. simpl app in H. injection H as H. exact H.
Qed.

(** *** Chunked *)

Lemma chunks_concat : forall fuel c xs, 1 <= c -> length xs <= fuel ->
  concat (chunks fuel c xs) = xs.
Proof.
  induction fuel as [|f IH]; intros c xs Hc Hl.
  - destruct xs; [reflexivity|simpl in Hl; lia].
  - destruct xs as [|x r]; [reflexivity|].
    change (chunks (S f) c (x :: r)) with (firstn c (x :: r) :: chunks f c (skipn c (x :: r))).
    simpl concat. rewrite IH; [apply firstn_skipn|assumption|].
    rewrite skipn_length. simpl length in *. lia.
Qed.

Lemma chunks_nonempty : forall fuel c xs, 1 <= c ->
  forall l, In l (chunks fuel c xs) -> l <> [].
Proof.
  induction fuel as [|f IH]; intros c xs Hc l Hin; [destruct Hin|].
  destruct xs as [|x r]; [destruct Hin|].
  destruct Hin as [<-|Hin].
  - destruct c; [lia|]. discriminate.
  - eapply IH; eassumption.
Qed.

(** Every chunk has at most c elements (the model is faithful to the chunk layout). *)
Lemma chunks_length : forall fuel c xs l, In l (chunks fuel c xs) -> length l <= c.
Proof.
  induction fuel as [|f IH]; intros c xs l Hin; [destruct Hin|].
  destruct xs as [|x r]; [destruct Hin|].
  destruct Hin as [<-|Hin].
  - rewrite firstn_length. lia.
  - eapply IH; eassumption.
Qed.

Lemma scan_from_app : forall l1 l2 a,
  scan_from a (l1 ++ l2) = scan_from a l1 ++ scan_from (op (prod l1) a) l2.
Proof.
  induction l1 as [|x r IH]; intros l2 a; simpl.
  - rewrite op_id_l; reflexivity.
  - f_equal. rewrite IH, op_assoc. reflexivity.
Qed.

Lemma map_scan_from : forall l a b,
  map (fun y => op y a) (scan_from b l) = scan_from (op b a) l.
Proof.
  induction l as [|x r IH]; intros a b; simpl; [reflexivity|].
  rewrite IH, op_assoc. reflexivity.
Qed.

Lemma last_scan_from : forall l a, l <> [] -> last (scan_from a l) e = op (prod l) a.
Proof.
  induction l as [|x r IH]; intros a Hne; [contradiction|].
  destruct r as [|y r'].
  - simpl. rewrite op_id_l. reflexivity.
  - change (last (scan_from a (x :: y :: r')) e) with (last (scan_from (op x a) (y :: r')) e).
    rewrite IH by discriminate. simpl prod. rewrite op_assoc. reflexivity.
Qed.

Lemma emit_correct : forall cs a, (forall l, In l cs -> l <> []) ->
  concat (map (fun '(l, cr) => map (fun y => op y cr) l)
              (combine (map seq_inclusive cs) (excl_from a (map prod cs))))
  = scan_from a (concat cs).
Proof.
  induction cs as [|c0 cs IH]; intros a Hne; [reflexivity|].
  simpl. rewrite IH by (intros; apply Hne; right; assumption).
  rewrite scan_from_app, seq_inclusive_scan_from, map_scan_from, op_id_l. reflexivity.
Qed.

Theorem chunked_correct : forall c xs, 1 <= c -> chunked c xs = inclusive_spec xs.
Proof.
  intros c xs Hc. rewrite <- scan_from_e.
  pose proof (chunks_concat (length xs) c xs Hc (le_n _)) as Hcat.
  pose proof (chunks_nonempty (length xs) c xs Hc) as Hne.
  unfold chunked.
  set (cs := chunks (length xs) c xs) in *.
  assert (Htot : map (fun l => last l e) (map seq_inclusive cs) = map prod cs).
  { rewrite map_map. apply map_ext_in. intros l Hl.
    rewrite seq_inclusive_scan_from, last_scan_from by (apply Hne; exact Hl).
    apply op_id_r. }
  rewrite Htot.
  destruct cs as [|c0 cs'] eqn:Ecs.
  - simpl in Hcat. rewrite <- Hcat. reflexivity.
  - unfold seq_exclusive. rewrite (exclusive_from_inclusive_correct seq_inclusive)
      by reflexivity.
    rewrite <- excl_from_e. simpl map. simpl excl_from.
    rewrite <- Hcat. simpl concat.
    rewrite emit_correct by (intros; apply Hne; right; assumption).
    rewrite scan_from_app, seq_inclusive_scan_from. reflexivity.
Qed.

(** *** Every schedule equals the sequential fold, inclusive and exclusive *)

Theorem hillis_steele_eq_fold : forall xs, hillis_steele xs = seq_inclusive xs.
Proof. intros; rewrite hillis_steele_correct, seq_inclusive_correct; reflexivity. Qed.
Theorem sklansky_eq_fold : forall xs, sklansky xs = seq_inclusive xs.
Proof. intros; rewrite sklansky_correct, seq_inclusive_correct; reflexivity. Qed.
Theorem brent_kung_eq_fold : forall xs, brent_kung xs = seq_inclusive xs.
Proof. intros; rewrite brent_kung_correct, seq_inclusive_correct; reflexivity. Qed.
Theorem blelloch_inclusive_eq_fold : forall xs, blelloch_inclusive xs = seq_inclusive xs.
Proof. intros; rewrite blelloch_inclusive_correct, seq_inclusive_correct; reflexivity. Qed.
Theorem blelloch_exclusive_eq_fold : forall xs, blelloch_exclusive xs = seq_exclusive xs.
Proof. intros; rewrite blelloch_exclusive_correct, seq_exclusive_correct; reflexivity. Qed.
Theorem chunked_eq_fold : forall c xs, 1 <= c -> chunked c xs = seq_inclusive xs.
Proof. intros; rewrite chunked_correct, seq_inclusive_correct by assumption; reflexivity. Qed.

Theorem hillis_steele_exclusive_eq_fold : forall xs,
  exclusive_from_inclusive hillis_steele xs = seq_exclusive xs.
Proof.
  intros; rewrite seq_exclusive_correct.
  apply exclusive_from_inclusive_correct, hillis_steele_eq_fold.
Qed.
Theorem sklansky_exclusive_eq_fold : forall xs,
  exclusive_from_inclusive sklansky xs = seq_exclusive xs.
Proof.
  intros; rewrite seq_exclusive_correct.
  apply exclusive_from_inclusive_correct, sklansky_eq_fold.
Qed.
Theorem brent_kung_exclusive_eq_fold : forall xs,
  exclusive_from_inclusive brent_kung xs = seq_exclusive xs.
Proof.
  intros; rewrite seq_exclusive_correct.
  apply exclusive_from_inclusive_correct, brent_kung_eq_fold.
Qed.
Theorem chunked_exclusive_eq_fold : forall c xs, 1 <= c ->
  exclusive_from_inclusive (chunked c) xs = seq_exclusive xs.
Proof.
  intros c xs Hc; rewrite seq_exclusive_correct.
  apply exclusive_from_inclusive_correct. intros; apply chunked_eq_fold; assumption.
Qed.

End Scans.
