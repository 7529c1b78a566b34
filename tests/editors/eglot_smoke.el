;;; eglot_smoke.el --- headless Emacs + eglot against fusionlens-lsp  -*- lexical-binding: t -*-

;; Emacs 28 (Debian: emacs-nox + elpa-eglot) or 29+ (eglot built in), in --batch: open a file,
;; start the server with M-x eglot from `eglot-server-programs', ask for the code actions of
;; a target, run its "Compile and benchmark" action, then ask for hover (raw and through
;; eglot's eldoc function), the code actions of the hovered line and of the target again,
;; and fusionlens/regions.  Results go to $FL_OUT as JSON.
;;
;;   FL_REPO=/path/to/repo FL_FILE=examples/mlp.py FL_TARGET=mlp_example FL_OUT=/tmp/out.json \
;;     emacs --batch -l tests/editors/eglot_smoke.el
;;
;; (--batch implies -q: no init file, but the site start files run, which is what puts
;; Debian's site-lisp/elpa on `package-directory-list'; -Q would hide elpa-eglot.)
;;
;; FL_PYTHON (default: python3) runs the server with PYTHONPATH=$FL_PYTHONPATH (default:
;; FL_REPO); FL_HOVER_TEXT picks the hovered line by its text; FL_TIMEOUT (seconds, default
;; 600) bounds the compile; FL_EVENTS, if set, gets eglot's events buffer (the JSON-RPC log).
;;
;; The action runs with eglot's own request timeout (10 s): the server answers at once and
;; the compile's results arrive later, so the script polls fusionlens/regions for them.

(require 'json)
(require 'subr-x)
(require 'cl-lib)

(defun fl-env (name &optional default)
  (let ((v (getenv name)))
    (if (and v (not (string-empty-p v))) v
      (or default (error "%s not set" name)))))

(defvar fl-repo (file-name-as-directory (fl-env "FL_REPO")))
(defvar fl-file (fl-env "FL_FILE"))
(defvar fl-target (fl-env "FL_TARGET"))
(defvar fl-out (fl-env "FL_OUT"))
(defvar fl-python (fl-env "FL_PYTHON" "python3"))
(defvar fl-hover-text (getenv "FL_HOVER_TEXT"))
(defvar fl-timeout (string-to-number (fl-env "FL_TIMEOUT" "600")))
(defvar fl-result nil "Alist (KEY . VALUE), newest first.")

(defun fl-wait-compiled (server uri start)
  "Poll fusionlens/regions until `fl-target' is compiled (ok or error): its status."
  (let (status)
    (while (let* ((regions (jsonrpc-request server :fusionlens/regions `(:uri ,uri)))
                  (target (cl-find-if (lambda (x) (equal (plist-get x :name) fl-target))
                                      (plist-get regions :targets))))
             (setq status (plist-get target :status))
             (not (member status '("ok" "error"))))
      (when (> (- (float-time) start) fl-timeout)
        (error "%s not compiled within %s s (status %s)" fl-target fl-timeout status))
      (accept-process-output nil 0.2))
    status))
(defvar fl-steps nil)

;; Nothing of the user's: no init file (--batch), a throwaway user directory (so no
;; packages from ~/.emacs.d/elpa either; set before package.el computes `package-user-dir').
(setq user-emacs-directory (file-name-as-directory (make-temp-file "eglot-smoke" t)))
(require 'package)
(setq package-user-dir (expand-file-name "elpa" user-emacs-directory))
(setenv "PYTHONPATH" (fl-env "FL_PYTHONPATH" fl-repo))

(defun fl-step (name value)
  (push name fl-steps)
  (push (cons (intern name) value) fl-result))

(defun fl-finish (code)
  (push (cons 'steps (vconcat (reverse fl-steps))) fl-result)
  (with-temp-file fl-out
    (insert (let ((json-encoding-pretty-print nil)) (json-encode (reverse fl-result)))))
  (kill-emacs code))

(defun fl-titles (actions)
  "Titles of ACTIONS (a list or vector of CodeAction/Command plists)."
  (vconcat (mapcar (lambda (a) (plist-get a :title)) actions)))

(defun fl-goto (line &optional column)
  "Point to 0-based LINE, COLUMN."
  (goto-char (point-min))
  (forward-line line)
  (move-to-column (or column 0)))

(defun fl-line-of (needle)
  "0-based line of the first line containing NEEDLE."
  (save-excursion
    (goto-char (point-min))
    (unless (search-forward needle nil t)
      (error "%S not in %s" needle fl-file))
    (1- (line-number-at-pos))))

(defun fl-actions-at (line)
  "Code actions for all of 0-based LINE, as `eglot-code-actions' asks."
  (fl-goto line)
  (eglot-code-actions (line-beginning-position) (line-end-position)))

(defun fl-eldoc-hover ()
  "What eglot's eldoc hover function hands eldoc at point, or nil."
  (let ((got :none) (deadline (+ (float-time) 10)))
    (eglot-hover-eldoc-function (lambda (info &rest _) (setq got info)))
    (while (and (eq got :none) (< (float-time) deadline))
      (accept-process-output nil 0.05))
    (if (eq got :none) nil got)))

(condition-case err
    (progn
      ;; Eglot: built in from Emacs 29, else Debian's elpa-eglot (site-lisp/elpa, activated
      ;; by package.el).
      (unless (require 'eglot nil t)
        (package-initialize)
        (require 'eglot))
      (fl-step "eglot" (if (boundp 'eglot-version) eglot-version
                         (let ((d (locate-library "eglot"))) (and d (file-name-directory d)))))

      ;; The configuration docs/lsp.md shows, with this interpreter and the test's settings.
      (with-eval-after-load 'eglot
        (add-to-list 'eglot-server-programs
                     `((python-mode python-ts-mode)
                       . (,fl-python "-P" "-m" "lsp_server" "--stdio" :initializationOptions
                                     (:compileTrigger "manual" :benchmarkRepeats 2)))))
      (setq eglot-sync-connect t          ; M-x eglot returns once initialized
            eglot-connect-timeout 60)

      (find-file (expand-file-name fl-file fl-repo))
      (unless (derived-mode-p 'python-mode) (error "%s is not in python-mode" fl-file))
      (let ((default-directory fl-repo))
        (call-interactively #'eglot))   ; M-x eglot
      (let* ((server (or (eglot-current-server) (error "eglot did not connect")))
             (caps (eglot--capabilities server))
             (uri (plist-get (eglot--TextDocumentIdentifier) :uri))
             (target-line (fl-line-of (format "def %s(" fl-target)))
             (hover-line (if fl-hover-text (fl-line-of fl-hover-text) 0)))
        (fl-step "initialized" t)
        (fl-step "managed" (if (eglot-managed-p) t :json-false))
        (fl-step "capabilities" (vconcat (cl-loop for (k v) on caps by #'cddr
                                                  when (and v (not (eq v :json-false)))
                                                  collect (substring (symbol-name k) 1))))

        ;; The target's actions before any compile; run "Compile and benchmark" the way
        ;; eglot runs a chosen code action (its command through workspace/executeCommand).
        (let* ((actions (fl-actions-at target-line))
               (compile (cl-find-if (lambda (a) (string-prefix-p "Compile and benchmark"
                                                                 (plist-get a :title)))
                                    actions)))
          (fl-step "target_actions_before" (fl-titles actions))
          (unless compile (error "no \"Compile and benchmark\" action at line %d" target-line))
          (let* ((cmd (plist-get compile :command))
                 (t0 (float-time))
                 (res (condition-case e
                          (eglot-execute-command server (intern (plist-get cmd :command))
                                                 (plist-get cmd :arguments))
                        (jsonrpc-error
                         (error "%s did not answer within eglot's %s s: %S"
                                (plist-get cmd :command) jsonrpc-default-request-timeout (cdr e))))))
            (fl-step "compile" res)
            (fl-step "compile_seconds" (- (float-time) t0))
            (fl-step "compiled" (fl-wait-compiled server uri t0))))

        (fl-goto hover-line 4)
        (let ((hover (jsonrpc-request server :textDocument/hover
                                      (eglot--TextDocumentPositionParams))))
          (fl-step "hover" `((line . ,hover-line)
                             (kind . ,(plist-get (plist-get hover :contents) :kind))
                             (value . ,(plist-get (plist-get hover :contents) :value)))))
        (fl-goto hover-line 4)
        (fl-step "eldoc_hover" (fl-eldoc-hover))
        (fl-step "actions" (fl-titles (fl-actions-at hover-line)))
        (fl-step "target_actions" (fl-titles (fl-actions-at target-line)))
        (fl-step "regions" (jsonrpc-request server :fusionlens/regions `(:uri ,uri)))
        (fl-step "uri" uri)
        (when-let ((events (getenv "FL_EVENTS")))
          (with-current-buffer (jsonrpc-events-buffer server)
            (write-region nil nil events)))
        (eglot-shutdown server)
        (fl-step "shutdown" t))
      (fl-finish 0))
  (error
   (push (cons 'error (error-message-string err)) fl-result)
   (message "eglot_smoke: %s" (error-message-string err))
   (fl-finish 1)))

;;; eglot_smoke.el ends here
