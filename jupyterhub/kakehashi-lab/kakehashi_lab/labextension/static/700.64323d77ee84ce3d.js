"use strict";(self.rspackChunkkakehashi_lab=self.rspackChunkkakehashi_lab||[]).push([[700],{646(e,r,t){var n=t(601),o=t.n(n),a=t(314),i=(t.n(a))()(o());i.push([e.id,`/* The "Submit notebook as job" dialog. Lab's own variables keep it in the user's theme. */
.kk-dialog .jp-Dialog-content {
  min-width: 32rem;
  max-width: 44rem;
}

.kk-form,
.kk-followup {
  display: flex;
  flex-direction: column;
  gap: 0.5rem;
}

.kk-field {
  display: grid;
  grid-template-columns: 8rem 1fr;
  align-items: center;
  gap: 0.5rem;
}

.kk-field select,
.kk-field input {
  font: inherit;
  padding: 0.2rem 0.3rem;
  color: var(--jp-ui-font-color1);
  background: var(--jp-input-background);
  border: var(--jp-border-width) solid var(--jp-border-color1);
}

.kk-parameters {
  display: flex;
  flex-direction: column;
  gap: 0.4rem;
  border: var(--jp-border-width) solid var(--jp-border-color2);
  padding: 0.4rem 0.6rem;
}

.kk-notebook,
.kk-hint {
  color: var(--jp-ui-font-color2);
  margin: 0;
}

.kk-estimate {
  min-height: 1.4em;
  margin: 0;
}

.kk-error {
  color: var(--jp-error-color1);
  margin: 0;
}

.kk-error:empty {
  display: none;
}

.kk-followup button {
  align-self: flex-start;
}
`,""]),t.d(r,{},{A:i})},314(e){e.exports=function(e){var r=[];return r.toString=function(){return this.map(function(r){var t="",n=void 0!==r[5];return r[4]&&(t+="@supports (".concat(r[4],") {")),r[2]&&(t+="@media ".concat(r[2]," {")),n&&(t+="@layer".concat(r[5].length>0?" ".concat(r[5]):""," {")),t+=e(r),n&&(t+="}"),r[2]&&(t+="}"),r[4]&&(t+="}"),t}).join("")},r.i=function(e,t,n,o,a){"string"==typeof e&&(e=[[null,e,void 0]]);var i={};if(n)for(var s=0;s<this.length;s++){var c=this[s][0];null!=c&&(i[c]=!0)}for(var l=0;l<e.length;l++){var u=[].concat(e[l]);n&&i[u[0]]||(void 0!==a&&(void 0===u[5]||(u[1]="@layer".concat(u[5].length>0?" ".concat(u[5]):""," {").concat(u[1],"}")),u[5]=a),t&&(u[2]&&(u[1]="@media ".concat(u[2]," {").concat(u[1],"}")),u[2]=t),o&&(u[4]?(u[1]="@supports (".concat(u[4],") {").concat(u[1],"}"),u[4]=o):u[4]="".concat(o)),r.push(u))}},r}},601(e){e.exports=function(e){return e[1]}},72(e){var r=[];function t(e){for(var t=-1,n=0;n<r.length;n++)if(r[n].identifier===e){t=n;break}return t}function n(e,n){for(var o={},a=[],i=0;i<e.length;i++){var s=e[i],c=n.base?s[0]+n.base:s[0],l=o[c]||0,u="".concat(c," ").concat(l);o[c]=l+1;var p=t(u),d={css:s[1],media:s[2],sourceMap:s[3],supports:s[4],layer:s[5]};if(-1!==p)r[p].references++,r[p].updater(d);else{var f=function(e,r){var t=r.domAPI(r);return t.update(e),function(r){r?(r.css!==e.css||r.media!==e.media||r.sourceMap!==e.sourceMap||r.supports!==e.supports||r.layer!==e.layer)&&t.update(e=r):t.remove()}}(d,n);n.byIndex=i,r.splice(i,0,{identifier:u,updater:f,references:1})}a.push(u)}return a}e.exports=function(e,o){var a=n(e=e||[],o=o||{});return function(e){e=e||[];for(var i=0;i<a.length;i++){var s=t(a[i]);r[s].references--}for(var c=n(e,o),l=0;l<a.length;l++){var u=t(a[l]);0===r[u].references&&(r[u].updater(),r.splice(u,1))}a=c}}},659(e){var r={};e.exports=function(e,t){var n=function(e){if(void 0===r[e]){var t=document.querySelector(e);if(window.HTMLIFrameElement&&t instanceof window.HTMLIFrameElement)try{t=t.contentDocument.head}catch(e){t=null}r[e]=t}return r[e]}(e);if(!n)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");n.appendChild(t)}},540(e){e.exports=function(e){var r=document.createElement("style");return e.setAttributes(r,e.attributes),e.insert(r,e.options),r}},56(e,r,t){e.exports=function(e){var r=t.nc;r&&e.setAttribute("nonce",r)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var r=e.insertStyleElement(e);return{update:function(t){var n,o,a;n="",t.supports&&(n+="@supports (".concat(t.supports,") {")),t.media&&(n+="@media ".concat(t.media," {")),(o=void 0!==t.layer)&&(n+="@layer".concat(t.layer.length>0?" ".concat(t.layer):""," {")),n+=t.css,o&&(n+="}"),t.media&&(n+="}"),t.supports&&(n+="}"),(a=t.sourceMap)&&"u">typeof btoa&&(n+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(n,r,e.options)},remove:function(){var e;null===(e=r).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,r){if(r.styleSheet)r.styleSheet.cssText=e;else{for(;r.firstChild;)r.removeChild(r.firstChild);r.appendChild(document.createTextNode(e))}}},959(e,r,t){var n=t(72),o=t.n(n),a=t(825),i=t.n(a),s=t(659),c=t.n(s),l=t(56),u=t.n(l),p=t(540),d=t.n(p),f=t(113),m=t.n(f),v=t(646),h={};h.styleTagTransform=m(),h.setAttributes=u(),h.insert=c().bind(null,"head"),h.domAPI=i(),h.insertStyleElement=d(),o()(v.A,h),v.A&&v.A.locals&&v.A.locals}}]);