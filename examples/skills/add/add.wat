;; The example skill: add two numbers (the numbers ABI: f64 parameters in the
;; manifest's order, one number back). Assembled by the runtime (wasmtime.wat2wasm).
(module
  (func (export "add") (param $a f64) (param $b f64) (result f64)
    local.get $a
    local.get $b
    f64.add))
