(* The Coq half of proof.scan_fidelity (proofs/coq_check.py, `fidelity`): the scan models of
   proofs/Scan.v, extracted by ScanExtraction.v into scan_models.ml, run on the free magma of
   expression trees, every output printed as a tree. scan_trees.cpp prints the same cases from the
   compiled C++ headers in the same form; the driver compares the two streams byte for byte.

     scan_trees_coq <cases file>

   Each line of the cases file is `<schedule> <inclusive|exclusive> <n> <chunk size or ->`; for
   each one the program prints `# <the line>`, then the n outputs of that model on the leaves
   0 … n−1, one per line: a leaf is its index, the identity `e`, a compose `(later earlier)`.

   Nothing is identified in the magma (compose never simplifies, the identity is neutral only by
   name), so two equal streams mean the same composes, on the same operands, grouped and ordered
   the same way, and no compose with the identity on one side only. *)

open Scan_models

type tree = Leaf of int | Identity | Compose of tree * tree (* later, earlier *)

let compose later earlier = Compose (later, earlier)

(* The model of each C++ entry point, as schedules.hpp dispatches it: the exclusive scans go
   through derive.hpp (exclusive_from_inclusive), except Blelloch's, which is natively exclusive,
   and the sequential one, whose model seq_exclusive is that derivation already. *)
let model schedule mode chunk =
  match (schedule, mode) with
  | "sequential", "inclusive" -> seq_inclusive compose
  | "sequential", "exclusive" -> seq_exclusive compose Identity
  | "hillis_steele", "inclusive" -> hillis_steele compose Identity
  | "hillis_steele", "exclusive" -> exclusive_from_inclusive Identity (hillis_steele compose Identity)
  | "sklansky", "inclusive" -> sklansky compose Identity
  | "sklansky", "exclusive" -> exclusive_from_inclusive Identity (sklansky compose Identity)
  | "brent_kung", "inclusive" -> brent_kung compose Identity
  | "brent_kung", "exclusive" -> exclusive_from_inclusive Identity (brent_kung compose Identity)
  | "blelloch", "inclusive" -> blelloch_inclusive compose Identity
  | "blelloch", "exclusive" -> blelloch_exclusive compose Identity
  | "chunked", "inclusive" -> chunked compose Identity chunk
  | "chunked", "exclusive" -> exclusive_from_inclusive Identity (chunked compose Identity chunk)
  | _ -> failwith (Printf.sprintf "unknown case `%s %s`" schedule mode)

let write buf =
  let rec go = function
    | Leaf k -> Buffer.add_string buf (string_of_int k)
    | Identity -> Buffer.add_char buf 'e'
    | Compose (later, earlier) ->
        Buffer.add_char buf '(';
        go later;
        Buffer.add_char buf ' ';
        go earlier;
        Buffer.add_char buf ')'
  in
  go

let run_case buf line =
  Scanf.sscanf line "%s %s %d %s%!" (fun schedule mode n chunk ->
      let scan =
        match chunk with
        | "-" when schedule <> "chunked" -> model schedule mode 0
        | c when schedule = "chunked" && c <> "-" -> model schedule mode (int_of_string c)
        | _ -> failwith ("a chunk size goes with the chunked schedule, and only with it: `" ^ line ^ "`")
      in
      Buffer.add_string buf ("# " ^ line ^ "\n");
      List.iter
        (fun t ->
          write buf t;
          Buffer.add_char buf '\n')
        (scan (List.init n (fun i -> Leaf i))))

let () =
  if Array.length Sys.argv <> 2 then (
    prerr_endline "usage: scan_trees_coq <cases file>";
    exit 2);
  let cases = open_in Sys.argv.(1) in
  let buf = Buffer.create (1 lsl 20) in
  (try
     while true do
       let line = input_line cases in
       if line <> "" then (
         run_case buf line;
         (* One case at a time: the driver compares as the text arrives. *)
         Buffer.output_buffer stdout buf;
         Buffer.clear buf)
     done
   with End_of_file -> ());
  close_in cases;
  flush stdout
