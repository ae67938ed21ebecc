(** * The scan models of Scan.v, extracted to OCaml for proof.scan_fidelity.

    coq_check.py [extract] compiles this file in the build directory (never here), against the
    Scan.vo compiled by proof.Scan, and the extraction writes scan_models.ml / .mli there;
    scan_trees.ml runs the models on expression trees, and coq_check.py [fidelity] compares their
    trees with those of the compiled C++ headers (scan_trees.cpp).

    What is trusted beyond Coq's kernel: the extraction itself, the OCaml compiler, and the
    realisers below, which replace Coq's unary definitions on [nat] by machine integers.  Without
    them [nat] is a unary list and the models are quadratic or worse in n at every index; with them
    n = 1025 takes a fraction of a second.  Every value here is at most a few times n, far below
    max_int, so the realisers agree with the Coq functions on every value that occurs. *)

From Coq Require Extraction ExtrOcamlBasic.
(** nat as OCaml's int: constructors, the case analysis, +, −, ×, ≤ (the standard realisers). *)
From Coq Require ExtrOcamlNatInt.
From KalmanOracle Require Scan.

Extraction Language OCaml.

(** The three operations of the index-level models (hs_level, skl_level) that ExtrOcamlNatInt
    leaves unary: [<?], [/] (Coq's n / 0 is 0), and the parity test of Sklansky's level. *)
Extract Inlined Constant Coq.Arith.PeanoNat.Nat.ltb => "(<)".
Extract Constant Coq.Arith.PeanoNat.Nat.div => "(fun n m -> if m = 0 then 0 else n / m)".
Extract Constant Coq.Arith.PeanoNat.Nat.odd => "(fun n -> n land 1 = 1)".

(** Every model of Scan.v, unchanged; the Section's operation and identity become arguments. *)
Extraction "scan_models.ml"
  Scan.seq_inclusive Scan.seq_exclusive Scan.exclusive_from_inclusive
  Scan.hillis_steele Scan.sklansky Scan.brent_kung
  Scan.blelloch_inclusive Scan.blelloch_exclusive Scan.chunked.
